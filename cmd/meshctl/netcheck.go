package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/meshd/meshd/agent/apitype"
)

// netcheckCommand is `meshctl netcheck`: meshd checks this node's UDP
// path to each control node with STUN from one socket, and reports a
// line with a code per control node (answered, the address it saw), the
// NAT's mapping and whether a direct path is possible or which relay
// carries it. Blocked UDP exits 1 with codes.OverlayUDPBlocked.
func (a *app) netcheckCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "netcheck",
		Short: "Check this node's UDP path to the control nodes: NAT mapping, direct paths, relay",
		Long: "meshctl netcheck asks meshd to send a STUN Binding request from one UDP socket to each control node " +
			"(on its STUN port, ports.stun, 3478 by default) and prints a line per control node (whether it answered " +
			"and the address it saw this node as), then the NAT's mapping: none, port-preserving (the same port as " +
			"the local one), endpoint-independent (one other port towards every control node) or symmetric (a different " +
			"port towards each), and whether a direct path to nodes behind other NATs is possible or which control " +
			"node relays that traffic. It exits 1 with OverlayUDPBlocked when no control node answers over UDP while " +
			"the TCP control port of one that says it serves STUN on that port does; a control node that answers on TCP " +
			"without saying so (an older release) gets a warning, NetcheckNotServed (not checked), and the check exits 0.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			rep, err := a.client().Netcheck(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if err := a.printJSON(rep); err != nil {
					return err
				}
			} else {
				a.out.Printf("netcheck from %s to %d control node(s)\n", rep.Local, len(rep.Targets))
				for _, l := range rep.Lines {
					a.printCheck(l)
				}
			}
			if f := rep.Failed(); f != nil {
				return apitype.NewError(f.Code, errors.New(f.Name+": "+f.Detail))
			}
			return nil
		},
	}
	a.addOutput(cmd)
	return cmd
}
