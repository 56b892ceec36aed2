package main

import (
	"time"

	"github.com/spf13/cobra"
)

func (a *app) keysCommand() *cobra.Command {
	keys := &cobra.Command{
		Use:   "keys",
		Short: "Manage the cluster's gossip key",
		Args:  args(cobra.NoArgs),
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	rotate := &cobra.Command{
		Use:   "rotate",
		Short: "Replace the cluster's gossip key (on a control node)",
		Long: "rotate generates a new gossip key and takes every active member through three steps, each recorded " +
			"in raft and handed out over mTLS (never over gossip): install it next to the old key, make it the " +
			"primary, drop the old key. Between steps it waits until every live member reports the step done; " +
			"one that does not within 30s stops the rotation with X504506KEYSTL naming it (run rotate again once " +
			"it is back). A node removed from the cluster cannot fetch the new key. `remove` rotates the key on its own.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			r, err := a.client().RotateKeys(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(r)
			}
			a.out.Printf("gossip key rotated: primary %s, %d live members switched, in %s\n", r.PrimaryKey, r.Members,
				r.Took.Round(time.Millisecond))
			return nil
		},
	}
	a.addOutput(rotate)
	keys.AddCommand(rotate)
	return keys
}
