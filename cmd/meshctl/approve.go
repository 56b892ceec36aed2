package main

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshd/meshd/agent/apitype"
)

func (a *app) approveCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "approve NAME CODE",
		Short: "Approve the waiting join of NAME with the code its machine shows (on any control node)",
		Long: "approve lets the join of NAME go on. The token must have been minted with `meshctl admit NAME --approve`; " +
			"its join waits after it has verified the cluster and shows a 6-digit code, derived from its own TLS session " +
			"with the seed. Read the code off the joining machine (its `meshctl join` output), never from anywhere else: " +
			"someone who holds a leaked copy of the token gets a join of their own, with another code, that only " +
			"approving their code would let in. A code that no waiting join shows is counted (X403040APRWRG); the fifth " +
			"burns the token (X403041APRBRN). Without approval the join fails when the token expires (X408042APRTMO). " +
			"`meshctl tokens` shows which tokens wait and where their joins come from.",
		Example: "  meshctl admit w1 --approve          # on a control node; the join will wait\n" +
			"  meshctl join --token-file w1.token   # on w1: prints the code, e.g. 123 456\n" +
			"  meshctl approve w1 123456            # on any control node",
		Args: args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			resp, err := a.client().Approve(cmd.Context(), apitype.ApproveRequest{Name: argv[0], Code: argv[1]})
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(resp)
			}
			a.out.Printf("approved the join of %s from %s (via %s); it goes on now\n", resp.Name, resp.Source, resp.Via)
			return nil
		},
	}
	a.addOutput(cmd)
	return cmd
}

// printJoinLine prints one line of a join as it streams: text, or with -o
// json one JSON object per line.
func (a *app) printJoinLine(l apitype.JoinLine, asJSON bool) {
	if asJSON {
		var b bytes.Buffer
		_ = json.NewEncoder(&b).Encode(l)
		_, _ = a.stdout.Write(escapeJSON(b.Bytes()))
		return
	}
	if l.Warning != nil {
		a.errOut.Printf("warning %s: %s\n", l.Warning.Code, l.Warning.Detail)
	}
	if l.Step != "" {
		a.out.Printf("• %s\n", l.Step)
	}
	if ap := l.Approval; ap != nil {
		code := ap.Code
		if len(code) == 6 {
			code = code[:3] + " " + code[3:]
		}
		a.out.Printf("• waiting for approval: code %s\n", code)
		a.out.Printf("  on a control node run: meshctl approve %s %s   (before %s)\n", ap.Name, ap.Code,
			ap.Expires.Local().Format(time.RFC3339))
	}
}

// approvalState is a token row's approval column.
func approvalState(t apitype.Token) string {
	ap := t.Approval
	if ap == nil {
		return "-"
	}
	switch ap.State {
	case apitype.ApprovalStateWaiting:
		s := "waiting:"
		for _, w := range ap.Waiting {
			s += " " + w.Source
		}
		return s
	case apitype.ApprovalStateApproved:
		return "approved by " + ap.ApprovedBy
	}
	return ap.State
}
