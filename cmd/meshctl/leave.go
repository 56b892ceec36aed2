package main

import (
	"strings"
	"time"

	"github.com/spf13/cobra"
)

func (a *app) leaveCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "leave",
		Short: "Take this node out of its cluster and wipe its state",
		Long: "leave takes this node out of its cluster for good. A control node first leaves raft: refused for the CA " +
			"holder, and with QuorumLoss (naming the voters that are down) when the voters the leader still reaches " +
			"afterwards would be fewer than a majority. Then a control node records it left, which revokes every " +
			"certificate it ever held as a removal does: every member blocks them (a copy of its files reaches no " +
			"one), and the members acknowledge it as they do a removal. It leaves gossip, and meshd wipes its state " +
			"and runs unjoined, ready for `meshctl join`.\n\n" +
			"Leaving frees the node's name: `meshctl admit NAME` works again at once, and the join with that token " +
			"reuses the left node's record, so the node keeps its node id and overlay IP (with new keys; its old " +
			"certificates are revoked). No `meshctl remove` is needed, and no restart of meshd.",
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
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a node from the cluster and revoke its certificates (on a control node)",
		Long: "remove takes a dead or unwanted node out of the cluster: out of raft for a control node, its record " +
			"set to removed, its certificates revoked (every node's overlay blocks them) and out of gossip. It then " +
			"asks every live member to confirm that it blocks the node, waits up to --wait (default: the daemon's " +
			"revocation_ack_timeout) and prints who acknowledged and who is pending. It exits 0 either way: the " +
			"removal itself succeeded; `meshctl nodes` shows when the pending members acknowledge.",
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			r, err := a.client().RemoveWait(cmd.Context(), argv[0], wait)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(r)
			}
			a.warn(r.Warnings)
			a.out.Printf("%s removed; its certificates are revoked (revocation list version %d)\n", argv[0], r.Version)
			a.out.Printf("acknowledged (%d): %s\n", len(r.Acked), names(r.Acked))
			if len(r.Pending) > 0 {
				a.out.Printf("pending (%d, no answer within %s): %s\n", len(r.Pending), r.Bound, names(r.Pending))
			} else {
				a.out.Printf("every live member blocks %s (last acknowledgement after %s)\n", argv[0], r.LastAck.Round(time.Millisecond))
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 0, "how long to wait for the members' acknowledgements (0: the daemon's revocation_ack_timeout)")
	a.addOutput(cmd)
	return cmd
}

func (a *app) forgetCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "forget NAME",
		Short: "Drop the record of a node that left, was removed or failed its join (on a control node)",
		Long: "forget drops the record of a former node now: a node that left, was removed or failed its join. Its " +
			"name and overlay IP are free for the next admission (which would otherwise reuse the record), it is no " +
			"longer listed by `meshctl nodes --all`, and the event is audited. Every revocation of its certificates " +
			"stays until they expire: forgetting never makes a certificate valid again. A node that is still a member " +
			"is refused (NodeNotFormer): remove it first.",
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			r, err := a.client().Forget(cmd.Context(), argv[0])
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(r)
			}
			a.out.Printf("%s forgotten (it was %s, node id %s): its name and overlay IP %s are free; the revocations of its %d certificates stay\n",
				r.Name, r.State, r.ID, r.OverlayIP, r.Revocations)
			return nil
		},
	}
	a.addOutput(cmd)
	return cmd
}

// names lists names for a line of output, "-" when there are none.
func names(ns []string) string {
	if len(ns) == 0 {
		return "-"
	}
	return strings.Join(ns, ", ")
}
