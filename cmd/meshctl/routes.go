package main

import (
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/meshd/meshd/agent/apitype"
)

// routesCommand is `meshctl routes`: the prefixes members carry for the
// mesh (issue 33). A node asks (advertise), an operator on a control node
// decides (approve, withdraw, prefer), anyone lists.
func (a *app) routesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "routes",
		Short: "Reach networks behind members: advertise, approve, withdraw, prefer, list",
		Long: "A member can carry traffic for a network behind it (a LAN such as 192.168.50.0/24), or for everything " +
			"(an exit node: 0.0.0.0/0). It asks with `meshctl routes advertise`; nothing is carried until an operator " +
			"approves each prefix on a control node (`meshctl routes approve NODE CIDR`). The CA holder then reissues " +
			"the router's Nebula certificate to hold the prefix, and every other member routes it through the router. " +
			"When two routers are approved for the same prefix, one carries it and the other stands by; when the " +
			"carrier stops answering the prefix moves within seconds and stays there until `meshctl routes prefer` " +
			"moves it back.",
		Args: args(cobra.NoArgs),
	}
	cmd.AddCommand(a.routesAdvertiseCommand(), a.routesListCommand(),
		a.routeDecisionCommand("approve", apitype.PathRoutesApprove, "Approve a prefix a node asks to carry (on a control node)",
			"approve lets NODE carry CIDR: the CA holder reissues its Nebula certificate to hold it, and every member "+
				"routes the prefix to the node carrying it. The audit log names who approved. Approve 0.0.0.0/0 to make NODE "+
				"an exit node members may choose (`meshctl exit use NODE`)."),
		a.routeDecisionCommand("withdraw", apitype.PathRoutesWithdraw, "Take a prefix's approval back (on a control node)",
			"withdraw takes NODE's approval of CIDR back: the node's request stays, unapproved; the prefix moves to "+
				"another approved router if there is one; the certificates that held it are revoked once NODE has a new one."),
		a.routeDecisionCommand("prefer", apitype.PathRoutesPrefer, "Move a prefix to another approved router (on a control node)",
			"prefer makes NODE carry CIDR now, instead of the router carrying it: how a prefix moves back after a "+
				"failover. NODE must be approved for CIDR and answer over the overlay."))
	return cmd
}

func (a *app) routesAdvertiseCommand() *cobra.Command {
	var exit bool
	cmd := &cobra.Command{
		Use:   "advertise [CIDR...]",
		Short: "Ask to carry these prefixes (replaces what this node asked before)",
		Long: "advertise asks the cluster to let this node carry traffic for each CIDR (IPv4, no host bits), and with " +
			"--exit to be an exit node. It replaces the node's earlier request: a prefix left out is no longer carried " +
			"by it, and no arguments withdraws every request. Refused with a code, changing nothing: a prefix that " +
			"overlaps the overlay, another of the request, or a prefix another node is approved to carry without being " +
			"equal to it (X409681RTEOVL); one holding a control node's or relay's underlay address (X409682RTEUND). " +
			"Another node's mere request refuses nothing: overlapping requests are judged when approved.",
		Example: "  meshctl routes advertise 192.168.50.0/24        # on the router\n" +
			"  meshctl routes approve r1 192.168.50.0/24       # on a control node\n" +
			"  meshctl routes advertise --exit                 # offer this node as an exit node",
		Args: args(cobra.ArbitraryArgs),
		RunE: func(cmd *cobra.Command, argv []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			resp, err := a.client().AdvertiseRoutes(cmd.Context(), apitype.AdvertiseRequest{Prefixes: argv, Exit: exit})
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(resp)
			}
			a.out.Printf("asked to carry %s; a control node's operator approves each: meshctl routes approve NODE CIDR\n", askedList(argv, exit))
			return nil
		},
	}
	cmd.Flags().BoolVar(&exit, "exit", false, "offer this node as an exit node (the route 0.0.0.0/0)")
	a.addOutput(cmd)
	return cmd
}

func askedList(ps []string, exit bool) string {
	if exit {
		ps = append(ps, "0.0.0.0/0 (exit node)")
	}
	if len(ps) == 0 {
		return "nothing"
	}
	return strings.Join(ps, ", ")
}

func (a *app) routeDecisionCommand(verb, path, short, long string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   verb + " NODE CIDR",
		Short: short,
		Long:  long,
		Args:  args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			resp, err := a.client().RouteDecision(cmd.Context(), path, apitype.RouteRequest{Node: argv[0], Prefix: argv[1]})
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(resp)
			}
			a.printRoutes(resp)
			return nil
		},
	}
	a.addOutput(cmd)
	return cmd
}

func (a *app) routesListCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Every prefix asked, approved and carried, and this node's exit node",
		Long: "list shows, for each prefix a member asks to carry: the node, whether it is approved (and by whom, on a " +
			"control node), and whether it is active (the carrier now; an exit node: up in gossip) or standing by. " +
			"Then the exit node this node uses, if any.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			resp, err := a.client().Routes(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(resp)
			}
			a.printRoutes(resp)
			return nil
		},
	}
	a.addOutput(cmd)
	return cmd
}

func (a *app) printRoutes(r *apitype.Routes) {
	if len(r.Routes) == 0 {
		a.out.Printf("no routes asked\n")
	} else {
		tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
		p := printer{tw}
		p.Printf("PREFIX\tNODE\tSTATE\tNOW\tGOSSIP\tAPPROVED BY\n")
		for _, row := range r.Routes {
			now := "-"
			switch {
			case row.Active && row.Exit:
				now = "exit node"
			case row.Active:
				now = "carries"
			case row.Standby:
				now = "standby"
			}
			p.Printf("%s\t%s\t%s\t%s\t%s\t%s\n", row.Prefix, row.Node, row.State, now, dash(row.Gossip), dash(row.ApprovedBy))
		}
		_ = tw.Flush()
	}
	if e := r.Exit; e != nil {
		a.printExit(e)
	}
}

func (a *app) printExit(e *apitype.ExitState) {
	if e == nil {
		a.out.Printf("exit node: none (the default route stays on the underlay)\n")
		return
	}
	if e.Error != "" {
		a.out.Printf("exit node: %s, not in use: %s\n", e.Node, e.Error)
		return
	}
	a.out.Printf("exit node: %s via %s\n", e.Node, e.Via)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// exitCommand is `meshctl exit use NODE|off`.
func (a *app) exitCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "exit",
		Short: "Send this node's internet traffic through an exit node: use NODE, off",
		Args:  args(cobra.NoArgs),
	}
	use := &cobra.Command{
		Use:   "use NODE",
		Short: "Send this node's default route through NODE, an approved exit node",
		Long: "use sends everything this node routes by default through NODE's overlay address; NODE masquerades it " +
			"onto its own network. Nebula's own packets, and the paths to the control nodes, relays and peers, stay on " +
			"the underlay, so the tunnel never routes into itself; the local network stays direct. The choice survives a " +
			"restart. NODE must be an active member approved for 0.0.0.0/0 (X404685EXTNOT otherwise).",
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error { return a.setExit(cmd, argv[0]) },
	}
	off := &cobra.Command{
		Use:   "off",
		Short: "Stop using an exit node: the default route goes back to the underlay exactly as it was",
		Args:  args(cobra.NoArgs),
		RunE:  func(cmd *cobra.Command, _ []string) error { return a.setExit(cmd, "") },
	}
	a.addOutput(use)
	a.addOutput(off)
	cmd.AddCommand(use, off)
	return cmd
}

func (a *app) setExit(cmd *cobra.Command, node string) error {
	asJSON, err := a.json()
	if err != nil {
		return err
	}
	st, err := a.client().UseExit(cmd.Context(), node)
	if err != nil {
		return err
	}
	if asJSON {
		if st == nil {
			st = &apitype.ExitState{}
		}
		return a.printJSON(st)
	}
	a.printExit(st)
	return nil
}
