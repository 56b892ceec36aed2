package main

import (
	"errors"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshd/meshd/agent/apitype"
)

func (a *app) auditCommand() *cobra.Command {
	var since time.Duration
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show who changed the cluster, and when (on a control node)",
		Long: "audit lists the cluster's audit trail, oldest first: init, admit (a token minted), join (a node " +
			"admitted), confirm (it became active), leave, remove, token revoke, gossip key rotation, " +
			"certificate renewals and token pruning. The actor is uid=U@NODE for an operator who ran the " +
			"command as uid U on NODE's local socket, node:NODE for a node acting by itself, and either " +
			"followed by \"via NODE2\" when a control node relayed it (a worker's leave). Meshd sets it " +
			"from the caller's socket credentials or certificate; no request field can. The trail is kept " +
			"in raft (the same on every control node, kept across restarts) and holds the last 256 events.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			if since < 0 || cmd.Flags().Changed("since") && since == 0 {
				return usageError{errors.New("--since: want a positive duration such as 90m or 24h")}
			}
			events, err := a.client().Audit(cmd.Context(), since)
			if err != nil {
				return err
			}
			if asJSON {
				if events == nil {
					events = []apitype.AuditEvent{}
				}
				return a.printJSON(events)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			p := printer{tw}
			p.Printf("TIME\tEVENT\tACTOR\tSUBJECT\tDETAIL\n")
			for _, e := range events {
				p.Printf("%s\t%s\t%s\t%s\t%s\n", e.At.Local().Format(time.RFC3339), e.Event, e.Actor, e.Subject, e.Detail)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().DurationVar(&since, "since", 0, "only the events of this last duration (e.g. 90m, 24h)")
	a.addOutput(cmd)
	return cmd
}
