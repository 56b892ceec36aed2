package main

import (
	"github.com/spf13/cobra"
)

func (a *app) leaveCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "leave",
		Short: "Take this node out of its cluster and wipe its state",
		Long: "leave takes this node out of its cluster for good: its record is set to left, it leaves gossip " +
			"(the others withdraw it from their overlay), a control node leaves raft (refused for the last voter " +
			"and for the CA holder), then meshd wipes its state and runs unjoined.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.client().Leave(cmd.Context()); err != nil {
				return err
			}
			a.out.Println("left the cluster; meshd runs unjoined")
			return nil
		},
	}
}

func (a *app) removeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a node from the cluster and revoke its certificates (on a control node)",
		Long: "remove takes a dead or unwanted node out of the cluster: out of raft for a control node, its record " +
			"set to removed, its certificates revoked (every node's overlay blocks them) and out of gossip.",
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if err := a.client().Remove(cmd.Context(), argv[0]); err != nil {
				return err
			}
			a.out.Printf("%s removed; its certificates are revoked\n", argv[0])
			return nil
		},
	}
}
