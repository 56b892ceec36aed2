package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/trust"
)

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "meshctl",
		Short:         "Control the local meshd mesh agent",
		Long:          "meshctl creates a cluster, admits and joins nodes, and shows the cluster, by talking to the local meshd over its unix socket.",
		SilenceErrors: true,
		SilenceUsage:  true,
		Version:       apitype.NewBuild(version, commit).String(),
		Args:          cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, argv []string) error {
			if len(argv) > 0 {
				return unknownCommand(cmd, argv[0])
			}
			return cmd.Help()
		},
	}
	root.PersistentFlags().StringVar(&a.socket, "socket", localclient.SocketFromEnv(), "meshd's local API socket (or $MESHD_SOCKET)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(a.initCommand(), a.admitCommand(), a.joinCommand(), a.nodesCommand(),
		a.statusCommand(), a.tokensCommand(), a.explainCommand(), a.reloadCommand(), a.leaveCommand(),
		a.removeCommand(), a.forgetCommand(), a.keysCommand(), a.auditCommand(), a.approveCommand(), a.genDocsCommand(), a.caCommand())
	root.AddCommand(a.nebulaBundleCommand())            // nebulabundle.go: needs no meshd
	root.AddCommand(a.versionCommand())                 // version.go
	root.AddCommand(a.pingCommand())                    // ping.go
	root.AddCommand(a.netcheckCommand())                // netcheck.go
	root.AddCommand(a.uiCommand())                      // ui.go: the web console
	root.AddCommand(a.routesCommand(), a.exitCommand()) // routes.go
	a.wireCompletion(root)                              // completion.go: dynamic completion, "did you mean"
	return root
}

// args wraps a cobra positional-args check so that a mistake exits 2.
func args(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if err := check(cmd, a); err != nil {
			return usageError{err}
		}
		return nil
	}
}

func (a *app) addOutput(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&a.output, "output", "o", "table", "output format: table or json")
}

func (a *app) json() (bool, error) {
	switch a.output {
	case "json":
		return true, nil
	case "table", "":
		return false, nil
	}
	return false, usageError{fmt.Errorf("--output %q: want table or json", a.output)}
}

// printJSON writes v as an indented JSON document. encoding/json escapes
// C0 controls (ESC, CR, LF); escapeJSON escapes the rest of what a terminal
// would act on, so `meshctl nodes -o json` is as safe on a terminal as the
// table, and decodes to the raw values.
func (a *app) printJSON(v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := a.stdout.Write(escapeJSON(b.Bytes()))
	return err
}

func (a *app) initCommand() *cobra.Command {
	var req apitype.InitRequest
	cmd := &cobra.Command{
		Use:   "init --cluster NAME",
		Short: "Create a new cluster with this node as its origin (CA holder)",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			if req.Cluster == "" {
				return usageError{fmt.Errorf("--cluster is required")}
			}
			resp, err := a.client().Init(cmd.Context(), req)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(resp)
			}
			a.warn(resp.Warnings)
			a.out.Printf("cluster %q created (id %s)\n", resp.Cluster, resp.ClusterID)
			overlay := resp.OverlayIP
			if resp.OverlayIP6 != "" {
				overlay += " " + resp.OverlayIP6
			}
			a.out.Printf("node %s: origin, control, overlay %s, underlay %s\n", resp.Node, overlay, resp.Underlay)
			if resp.UnderlayWhy != "" {
				a.out.Printf("underlay chosen: %s\n", resp.UnderlayWhy)
			}
			a.out.Printf("cluster CA sha256: %s\n", resp.CAFingerprint)
			a.out.Println("next: meshctl admit NAME   (on this node) to let another machine join")
			return nil
		},
	}
	cmd.Flags().StringVar(&req.Cluster, "cluster", "", "cluster name (required)")
	cmd.Flags().StringVar(&req.Name, "name", "", "this node's name (default: the hostname)")
	cmd.Flags().StringVar(&req.AdvertiseAddr, "advertise-addr", "", "underlay IP, IPv4 or IPv6, other nodes reach this one on (default: the address of the default route's interface, IPv4 first)")
	cmd.Flags().StringVar(&req.AdvertiseIface, "advertise-iface", "", "advertise the address of interface `NAME` (refused when it has none or is down)")
	cmd.Flags().BoolVar(&req.Force, "force", false, "discard an existing cluster on this node and create a new one (refused on the CA holder: CAHolderStays)")
	cmd.Flags().StringVar(&req.OverlayCIDR, "overlay-cidr", "", "the IPv4 overlay `PREFIX`, /8 to /28 (default: overlay_cidr in meshd.yaml, 10.42.0.0/16)")
	cmd.Flags().StringVar(&req.OverlayCIDR6, "overlay-cidr6", "", "the IPv6 overlay `PREFIX`, a /64 in fd00::/8 (default: a ULA /64 generated for the cluster; none: an IPv4-only cluster with v1 certificates)")
	cmd.Flags().BoolVar(&req.Overlay6Global, "overlay6-global", false, "take an --overlay-cidr6 outside fd00::/8 (a prefix of yours, routed nowhere else)")
	a.addOutput(cmd)
	return cmd
}

func (a *app) admitCommand() *cobra.Command {
	var (
		req  apitype.AdmitRequest
		role string
	)
	cmd := &cobra.Command{
		Use:   "admit NAME | admit --reusable --uses N [--name-prefix P] | admit NAME --nebula-only [--renew]",
		Short: "Mint a one-time join token for the node NAME, or a reusable enrolment key for a fleet",
		Long: "admit mints a one-time join token for the node NAME (`meshctl join` spends it), or with --reusable an " +
			"enrolment key that admits up to --uses machines.\n\n" +
			"With --nebula-only the token admits NAME as a stock Nebula member: a device that runs the nebula binary, " +
			"not meshd (a phone, a router, another OS). On that device, or on any machine for it, `meshctl nebula-bundle " +
			"--token-file F --out DIR` spends the token and writes the device's certificate, CA and config.yml; no meshd " +
			"is needed there. --cert-lifetime sets how long the member's certificate lives (default: the cluster's). " +
			"--nebula-only --renew mints a renewal token for the active member NAME: `meshctl nebula-bundle --renew` " +
			"spends it for a new certificate of the key the member holds. A stock member's role is nebula and it is " +
			"never reusable, ephemeral or approved by code: --role, --reusable, --ephemeral and --approve are refused " +
			"with --nebula-only.",
		Example: "  meshctl admit w1 | tail -n 1 > w1.token\n" +
			"  meshctl admit --reusable --uses 50 --name-prefix web- --ttl 72h\n" +
			"  meshctl admit phone1 --nebula-only --group mobile --cert-lifetime 720h | tail -n 1 > phone1.token\n" +
			"  meshctl admit phone1 --nebula-only --renew | tail -n 1 > phone1-renew.token",
		Args: args(func(cmd *cobra.Command, argv []string) error {
			if req.Reusable && !req.NebulaOnly { // --nebula-only --reusable: refused by admitFlagsFit
				return cobra.NoArgs(cmd, argv)
			}
			return cobra.ExactArgs(1)(cmd, argv)
		}),
		RunE: func(cmd *cobra.Command, argv []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			if err := admitFlagsFit(cmd, &req); err != nil {
				return err
			}
			req.Role = role
			if req.NebulaOnly {
				req.Role = string(trust.RoleNebula)
			}
			if len(argv) == 1 {
				req.Name = argv[0]
			}
			resp, err := a.client().Admit(cmd.Context(), req)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(admitJSON(resp))
			}
			a.printAdmit(resp)
			return nil
		},
	}
	cmd.Flags().StringVar(&role, "role", "worker", "role to admit: worker or control (a reusable key admits workers only)")
	cmd.Flags().DurationVar(&req.TTL, "ttl", 15*time.Minute, "token lifetime (at most 1h; a reusable key: default 24h, at most 720h)")
	cmd.Flags().StringVar(&req.Addr, "addr", "", "bind the token to the joiner's source IP as the control node sees it")
	cmd.Flags().StringArrayVar(&req.Groups, "group", nil, "put the node in node group `G` (repeatable): its Nebula certificate carries it, for firewall rules")
	cmd.Flags().BoolVar(&req.Approve, "approve", false, "the join waits until an operator approves the code the new machine shows (`meshctl approve NAME CODE`)")
	cmd.Flags().BoolVar(&req.Reusable, "reusable", false, "mint an enrolment key that admits up to --uses machines, each named by the cluster")
	cmd.Flags().IntVar(&req.Uses, "uses", 0, "how many machines the reusable key may admit (1 to 100000; required with --reusable)")
	cmd.Flags().StringVar(&req.NamePrefix, "name-prefix", "node-", "the reusable key names its machines `P`1, P2, ...")
	cmd.Flags().BoolVar(&req.NameFromHost, "name-from-host", false, "the reusable key names a machine by its hostname when that is a valid, free name")
	cmd.Flags().BoolVar(&req.Ephemeral, "ephemeral", false, "the nodes it admits are ephemeral: removed by the cluster once down for ephemeral_after")
	cmd.Flags().BoolVar(&req.NebulaOnly, "nebula-only", false, "admit NAME as a stock Nebula member: a device that runs the nebula binary, not meshd (`meshctl nebula-bundle` spends the token)")
	cmd.Flags().BoolVar(&req.Renew, "renew", false, "with --nebula-only: a renewal token for the active stock Nebula member NAME (a new certificate for the key it holds)")
	cmd.Flags().DurationVar(&req.CertLifetime, "cert-lifetime", 0, "with --nebula-only: how long the member's Nebula certificate lives (default: the cluster's)")
	a.addOutput(cmd)
	return cmd
}

// admitFlagsFit checks that the flags given fit the kind of token asked
// for, and clears those a reusable key leaves to the cluster's defaults.
func admitFlagsFit(cmd *cobra.Command, req *apitype.AdmitRequest) error {
	changed := cmd.Flags().Changed
	if req.NebulaOnly {
		return nebulaFlagsFit(changed, req)
	}
	for _, f := range []string{"renew", "cert-lifetime"} {
		if changed(f) {
			return codes.Wrap(codes.BadRequest, fmt.Errorf("--%s is for a stock Nebula member's token: add --nebula-only", f))
		}
	}
	if !req.Reusable {
		for _, f := range []string{"uses", "name-prefix", "name-from-host"} {
			if changed(f) {
				return codes.Wrap(codes.BadRequest, fmt.Errorf("--%s is for a reusable key: add --reusable", f))
			}
		}
		req.NamePrefix = ""
		return nil
	}
	if !changed("uses") {
		return codes.Wrap(codes.KeyBadLimits, errors.New("a reusable key needs --uses N (1 to 100000): how many machines it may admit bounds what a leaked key lets anyone do"))
	}
	if !changed("ttl") {
		req.TTL = 0 // the key default (24h)
	}
	return nil
}

// nebulaFlagsFit is admitFlagsFit for --nebula-only: one named device
// that runs stock Nebula, whose role is nebula.
func nebulaFlagsFit(changed func(string) bool, req *apitype.AdmitRequest) error {
	why := map[string]string{
		"reusable":       "a stock Nebula member's token admits one named device",
		"uses":           "a stock Nebula member's token admits one named device",
		"name-prefix":    "a stock Nebula member's token admits one named device",
		"name-from-host": "a stock Nebula member's token admits one named device",
		"role":           "a stock Nebula member's role is nebula",
		"approve":        "a device that runs stock Nebula shows no approval code",
		"ephemeral":      "the cluster cannot see a stock Nebula member go down to reap it",
	}
	for _, f := range []string{"reusable", "uses", "name-prefix", "name-from-host", "role", "approve", "ephemeral"} {
		if changed(f) {
			return codes.Wrap(codes.BadRequest, fmt.Errorf("--%s does not go with --nebula-only: %s", f, why[f]))
		}
	}
	if req.Renew && changed("group") {
		return codes.Wrap(codes.BadRequest, errors.New("--group does not go with --renew: a renewal certifies the member's key with the groups it was admitted into"))
	}
	if changed("cert-lifetime") && req.CertLifetime <= 0 {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("--cert-lifetime %s: want a positive duration such as 720h", req.CertLifetime))
	}
	req.NamePrefix = ""
	return nil
}

// admitJSON is admit's -o json object.
func admitJSON(resp *apitype.AdmitResponse) map[string]any {
	out := map[string]any{"token": resp.Token, "id": resp.ID, "role": resp.Role, "expires": resp.Expires, "command": resp.Command}
	if resp.Reusable {
		out["reusable"], out["uses"], out["name_prefix"] = true, resp.Uses, resp.NamePrefix
		if resp.NameFromHost {
			out["name_from_host"] = true
		}
	} else {
		out["name"] = resp.Name
	}
	if resp.Ephemeral {
		out["ephemeral"] = true
	}
	if resp.Reuses != "" {
		out["reuses"] = resp.Reuses
	}
	if resp.Approve {
		out["approve"] = true
	}
	if len(resp.Groups) > 0 {
		out["groups"] = resp.Groups
	}
	if len(resp.Seeds) > 0 {
		out["seeds"] = resp.Seeds
	}
	if resp.NebulaOnly {
		out["nebula_only"] = true
		if resp.Renew {
			out["renew"] = true
		}
		if resp.CertLifetime > 0 {
			out["cert_lifetime"] = resp.CertLifetime.String() // a Go duration, as --cert-lifetime takes it
		}
	}
	return out
}

// printAdmit is admit's human output.
func (a *app) printAdmit(resp *apitype.AdmitResponse) {
	if resp.Reusable {
		host := ""
		if resp.NameFromHost {
			host = " (or its hostname, when that is a valid, free name)"
		}
		a.out.Printf("enrolment key: admits up to %d workers until %s, each named %sN%s (key id %s)\n", resp.Uses,
			resp.Expires.Local().Format(time.RFC3339), resp.NamePrefix, host, resp.ID)
	} else if resp.NebulaOnly && resp.Renew {
		a.out.Printf("renews the certificate of the stock Nebula member %s, token valid until %s (token id %s, one use)\n", resp.Name,
			resp.Expires.Local().Format(time.RFC3339), resp.ID)
	} else if resp.NebulaOnly {
		a.out.Printf("admits %s as a stock Nebula member (runs nebula, not meshd) until %s (token id %s, one use)\n", resp.Name,
			resp.Expires.Local().Format(time.RFC3339), resp.ID)
	} else {
		a.out.Printf("admits %s as %s until %s (token id %s, one use)\n", resp.Name, resp.Role,
			resp.Expires.Local().Format(time.RFC3339), resp.ID)
	}
	if resp.NebulaOnly {
		if resp.CertLifetime > 0 {
			a.out.Printf("certificate lifetime: %s\n", resp.CertLifetime)
		} else {
			a.out.Println("certificate lifetime: the cluster's default")
		}
	}
	if resp.Ephemeral {
		a.out.Println("ephemeral: the cluster removes each node it admits once the node has been down for ephemeral_after")
	}
	if len(resp.Groups) > 0 {
		a.out.Printf("node groups: %s (its Nebula certificate carries %s and these, for firewall rules)\n", strings.Join(resp.Groups, ", "), resp.Role)
	}
	if resp.Reuses != "" {
		a.out.Println(resp.Reuses)
	}
	if resp.Approve {
		a.out.Printf("the join waits for approval: run `meshctl approve %s CODE` on a control node with the code the new machine shows\n", resp.Name)
	}
	switch {
	case resp.Reusable:
		a.out.Printf("on each new machine run (or bake the key into the image and use --token-file):\n  %s\n", resp.Command)
	case resp.NebulaOnly:
		a.out.Printf("on the device, or on any machine for it, with the token in a file (it needs meshctl, not meshd):\n  %s\n", resp.Command)
	default:
		a.out.Printf("on the new machine run:\n  %s\n", resp.Command)
	}
	a.out.Println(resp.Token)
}

func (a *app) warn(ws []apitype.Warning) {
	for _, w := range ws {
		a.errOut.Printf("warning %s: %s (%s)\n", w.Code, w.Code.Cause(), w.Detail)
	}
}
