package main

import (
	"time"

	"github.com/spf13/cobra"
)

func (a *app) caCommand() *cobra.Command {
	ca := &cobra.Command{
		Use:   "ca",
		Short: "Manage the cluster's CA: custody (handoff, backup, restore) and rotation (rotate, status)",
		Args:  args(cobra.NoArgs),
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	ca.AddCommand(a.caHandoffCommand())
	a.addBackupCommands(ca)                                 // cabackup.go
	ca.AddCommand(a.caRotateCommand(), a.caStatusCommand()) // carotate.go
	return ca
}

func (a *app) caHandoffCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "handoff NODE",
		Short: "Move CA custody from this node (the CA holder) to another control node",
		Long: "handoff sends the CA keys over mTLS to NODE, an active control node that is a raft voter; NODE " +
			"writes them and proves it holds working keys by signing a probe this node verifies; raft then records " +
			"NODE as the CA holder and only then does this node delete its copy. If it fails at any step, run the " +
			"same command again: it finishes the move (after the record moved, run it on either node's old holder).",
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			r, err := a.client().CAHandoff(cmd.Context(), argv[0])
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(r)
			}
			a.warn(r.Warnings)
			switch {
			case r.Already:
				a.out.Printf("CA custody was already recorded with %s; this node's copy released: %t\n", r.To, r.Released)
			default:
				a.out.Printf("CA custody moved: %s -> %s in %s; this node's copy deleted: %t\n", r.From, r.To,
					r.Took.Round(time.Millisecond), r.Released)
			}
			return nil
		},
	}
	a.addOutput(c)
	return c
}
