package main

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshd/meshd/agent/apitype"
)

func (a *app) nodesCommand() *cobra.Command {
	var (
		w   watchFlags
		all bool
	)
	cmd := &cobra.Command{
		Use:   "nodes",
		Short: "List the cluster's nodes",
		Long: "List the cluster's nodes. -o wide adds whether each node is ephemeral (removed by the cluster once " +
			"gossip has seen it down for ephemeral_after) and its DNS name (NAME.CLUSTER.DOMAIN, as this node " +
			"answers it); -o json holds them as ephemeral and dns_name. A node that left, was removed or failed its " +
			"join is shown for the daemon's former_retention (default 24h) after it departed; --all shows every " +
			"record, and `meshctl forget NAME` drops one.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			wide := a.output == "wide"
			if wide {
				a.output = "table"
			}
			asJSON, err := a.json()
			if err != nil {
				return usageError{fmt.Errorf("--output %q: want table, wide or json", a.output)}
			}
			if w.watch {
				return a.watchNodes(cmd.Context(), w.interval, asJSON, wide, all) // watch.go
			}
			nodes, err := a.client().NodeList(cmd.Context(), all)
			if err != nil {
				return err
			}
			if asJSON {
				if nodes == nil {
					nodes = []apitype.Node{}
				}
				return a.printJSON(nodes)
			}
			return printNodes(a.stdout, nodes, time.Now(), wide)
		},
	}
	cmd.Flags().StringVarP(&a.output, "output", "o", "table", "output format: table, wide (with DNS names) or json")
	cmd.Flags().BoolVar(&all, "all", false, "also the nodes that departed longer ago than former_retention")
	w.add(cmd)
	return cmd
}

// printNodes writes the nodes table to out, "last seen" counted from
// now; wide adds the EPHEMERAL and DNS NAME columns.
func printNodes(out io.Writer, nodes []apitype.Node, now time.Time, wide bool) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	p := printer{tw}
	rowf := "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s"
	if wide {
		p.Printf("NAME\tROLE\tSTATE\tGOSSIP\tOVERLAY\tOVERLAY6\tUNDERLAY\tNAT\tRAFT\tCERT EXPIRES\tVERSION\tTUNNEL\tEPHEMERAL\tDNS NAME\n")
		rowf += "\t%s\t%s"
	} else {
		p.Printf("NAME\tROLE\tSTATE\tGOSSIP\tOVERLAY\tOVERLAY6\tUNDERLAY\tNAT\tRAFT\tCERT EXPIRES\tVERSION\tTUNNEL\n")
	}
	self, nat, relay, unheard := false, false, false, false
	var broken []string // the footnotes of nodes some member cannot reach
	for _, n := range nodes {
		self = self || n.Self
		name, st, g := n.Name, n.State, n.Gossip
		if n.Self {
			name += " *"
		}
		if len(n.UnreachableFrom) > 0 {
			name += " !"
			broken = append(broken, fmt.Sprintf("! %s: unreachable over the overlay from %s (their own probes)",
				n.Name, strings.Join(n.UnreachableFrom, ", ")))
		}
		if n.Revocation != "" {
			st += " (revocation " + n.Revocation + ")"
		}
		if n.Cause != "" {
			st += " (" + n.Cause + ")"
		}
		if !n.LastSeen.IsZero() {
			g += fmt.Sprintf(" (last seen %s ago)", now.Sub(n.LastSeen).Round(time.Second))
		}
		if !n.Unheard.IsZero() {
			g += fmt.Sprintf(" (unheard %s)", max(0, now.Sub(n.Unheard)).Round(time.Second))
			unheard = true
		}
		expires := date(n.CertExpires)
		if n.Role == "nebula" && !n.CertExpires.IsZero() && !now.Before(n.CertExpires) {
			// Nothing renews a stock Nebula member's certificate: expired,
			// it is cut off until renewed (`admit NAME --nebula-only --renew`).
			expires += " (expired)"
		}
		cells := []any{name, roleCell(n), st, g, n.OverlayIP, cmp.Or(n.OverlayIP6, "-"), cmp.Or(n.Underlay, "-"), natCell(n), n.Raft, expires, n.Version, tunnelCell(n)}
		if wide {
			cells = append(cells, ephemeralCell(n), cmp.Or(n.DNSName, "-"))
		}
		p.Printf(rowf+"\n", cells...)
		nat, relay = nat || n.BehindNAT, relay || n.Relay
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if self {
		printer{out}.Printf("* this node\n")
	}
	if nat {
		printer{out}.Printf("NAT: behind a NAT, seen by the cluster from this address (UNDERLAY is the one it advertised)\n")
	}
	if relay {
		printer{out}.Printf("+relay: offers itself as a Nebula relay (relay: true); control nodes relay anyway\n")
	}
	if unheard {
		printer{out}.Printf("unheard: no Nebula host update for three lighthouse intervals on every control node that answered the raft leader, for so long\n")
	}
	for _, l := range broken {
		printer{out}.Printf("%s\n", l)
	}
	return nil
}

// roleCell is the ROLE cell: the role, "+relay" for a node that offers
// itself as a relay.
func roleCell(n apitype.Node) string {
	if n.Relay {
		return n.Role + "+relay"
	}
	return n.Role
}

// natCell is the NAT cell: the address the cluster sees a node behind a
// NAT from, "-" for a node seen from the address it advertised (or not
// known).
func natCell(n apitype.Node) string {
	if n.BehindNAT && n.SeenFrom != "" {
		return n.SeenFrom
	}
	return "-"
}

// tunnelCell is the TUNNEL cell: this node's Nebula tunnel to n, "direct"
// or "relayed-via-NAME", "-" when it has none (itself, or no traffic
// yet).
func tunnelCell(n apitype.Node) string {
	switch {
	case n.Tunnel == nil:
		return "-"
	case n.Tunnel.Relay != "":
		return "relayed-via-" + n.Tunnel.Relay
	}
	return "direct"
}

func (a *app) statusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show this node's state",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			s, err := a.client().Status(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(s)
			}
			a.warn(s.Warnings)
			switch s.State {
			case "unjoined":
				a.out.Printf("meshd %s is running and has not joined a cluster\n", s.Version)
				a.out.Println("next: meshctl init --cluster NAME, or meshctl join TOKEN")
				return nil
			case "starting":
				a.out.Printf("meshd %s is starting\n", s.Version)
				return nil
			case "refused":
				a.out.Printf("meshd %s refuses to run node %s (%s) of cluster %s\n", s.Version, s.Node, s.NodeID, s.Cluster)
				if e := s.Error; e != nil {
					a.out.Printf("%s %s\n%s\nremedy: %s\n", e.ErrCode, e.Cause, e.Detail, e.Remedy)
				}
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			p := printer{tw}
			row := func(k, v string) {
				if v != "" {
					p.Printf("%s:\t%s\n", k, v)
				}
			}
			row("state", stateCell(s)) // removed.go
			removedRows(row, s)
			row("cluster", fmt.Sprintf("%s (%s)", s.Cluster, s.ClusterID))
			row("node", fmt.Sprintf("%s (%s)", s.Node, s.NodeID))
			row("role", s.Role)
			switch {
			case s.CAHolder && s.CABackedUp.IsZero():
				row("ca holder", "yes, never backed up (meshctl ca backup)")
			case s.CAHolder:
				row("ca holder", "yes, last backup "+date(s.CABackedUp))
			default:
				row("ca holder", s.CAHolderNode)
			}
			row("overlay", s.OverlayIP)
			if s.OverlayIP6 != "" {
				row("overlay6", s.OverlayIP6)
			}
			row("underlay", s.Underlay)
			row("raft", s.Raft)
			row("leader", s.Leader)
			if s.Quorum != nil && s.Leader == "" {
				row("leader", "none")
			}
			quorumRows(row, s.Quorum) // quorum.go
			if w := s.Watch; w != nil {
				from := w.From
				if from == "" {
					from = "no stream open"
				}
				row("watch", fmt.Sprintf("%s, at raft index %d (streams %d, whole tables %d, changes %d, strict asks %d)",
					from, w.Index, w.Streams, w.Full, w.Deltas, w.Strict))
			}
			if s.CertExpiresOf != "" {
				row("cert expires", fmt.Sprintf("%s (%s, the earlier of TLS and Nebula)", s.CertExpires.Local().Format(time.RFC3339), s.CertExpiresOf))
			} else {
				row("cert expires", date(s.CertExpires))
			}
			row("version", s.Version)
			if g := s.Gossip; g != nil {
				row("gossip", fmt.Sprintf("%d members, %d alive", g.Members, g.Alive))
				keys := fmt.Sprintf("%d, primary %s", g.Keys, g.PrimaryKey)
				if !g.KeysRotated.IsZero() {
					keys += ", last rotated " + date(g.KeysRotated)
				}
				row("gossip keys", keys)
			}
			if s.OutOfPool {
				row("gossip", "none: out of the pool (gossip_pool: false), the others' liveness from the node list")
			}
			dnsRows(row, s.DNS)
			for _, w := range s.Approvals {
				row("waits for approval", fmt.Sprintf("%s, join from %s via %s since %s: `meshctl approve %s CODE` with the code it shows",
					w.Name, w.Source, w.Via, w.Since.Local().Format(time.RFC3339), w.Name))
			}
			if o := s.Overlay; o != nil {
				mode := o.Mode
				if o.Device != "" {
					mode += " (" + o.Device + ")"
				}
				if o.Lighthouse {
					mode += ", lighthouse"
				}
				row("overlay mode", mode)
				row("lighthouses", strings.Join(o.Lighthouses, ", "))
				row("offloads", offloadsCell(o))
				row("unreachable", strings.Join(o.Unreachable, ", ")) // pair health: its own probes fail
				row("silent here", silentCell(o))                     // a lighthouse: members whose host updates stopped
				if o.Error != nil {
					row("overlay error", fmt.Sprintf("%s: %s (%s)", o.Error.ErrCode, o.Error.Cause, o.Error.Detail))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				a.out.Printf("tunnels (%d):\n", len(o.Tunnels))
				for _, t := range o.Tunnels {
					p.Printf("  %s\t%s\t%s\n", t.Name, t.OverlayIP, t.Remote)
				}
			}
			return tw.Flush()
		},
	}
	a.addOutput(cmd)
	return cmd
}

func (a *app) tokensCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "List join tokens (never their secrets), or revoke one",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			toks, err := a.client().Tokens(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if toks == nil {
					toks = []apitype.Token{}
				}
				return a.printJSON(toks)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			p := printer{tw}
			p.Printf("ID\tNAME\tROLE\tSTATE\tUSES LEFT\tEXPIRES\tADDR\tCONSUMED BY\tAPPROVAL\n")
			for _, t := range toks {
				name, uses := t.Name, "1"
				if t.State != apitype.TokenUnused {
					uses = "0"
				}
				if t.Key != nil { // a reusable key: the names it gives, uses left of all
					name, uses = t.Key.NamePrefix+"*", fmt.Sprintf("%d/%d", t.Key.Left, t.Key.Uses)
				}
				if t.Ephemeral {
					name += " (ephemeral)"
				}
				p.Printf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, name, t.Role, t.State, uses,
					t.Expires.Local().Format(time.RFC3339), t.Addr, t.ConsumedBy, approvalState(t))
			}
			return tw.Flush()
		},
	}
	a.addOutput(cmd)
	cmd.AddCommand(a.revokeTokenCommand())
	return cmd
}

// dnsRows are status' rows about the names: the zone, where it is
// answered, systemd-resolved's routing, and how to point a resolver at
// it when resolved does not.
func dnsRows(row func(k, v string), d *apitype.DNS) {
	if d == nil {
		return
	}
	row("dns", fmt.Sprintf("%s, %d names, on %s", cmp.Or(d.Domain, "-"), d.Names, cmp.Or(strings.Join(d.Listening, ", "), "nothing")))
	for _, ns := range d.NotServed {
		row("dns not served", ns)
	}
	resolved := d.Resolved
	if d.Link != "" {
		resolved += " on " + d.Link
	}
	row("dns resolved", resolved)
	row("dns hint", d.Hint)
}

func date(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02")
}

// ephemeralCell is the EPHEMERAL column of `nodes -o wide`: "yes" for a
// node the cluster removes once gossip has seen it down for
// ephemeral_after (issue 31), else "-".
func ephemeralCell(n apitype.Node) string {
	if n.Ephemeral {
		return "yes"
	}
	return "-"
}
