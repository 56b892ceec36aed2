package main

import (
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshd/meshd/agent/apitype"
)

func (a *app) caRotateCommand() *cobra.Command {
	var req apitype.CARotateRequest
	rotate := &cobra.Command{
		Use:   "rotate [--now] [--dual-stack [--overlay-cidr6 PREFIX]]",
		Short: "Replace the cluster's CAs without an outage (on the CA holder)",
		Long: "rotate creates the next CA pair on the CA holder (its keys never leave it) and takes the cluster " +
			"through the rotation's phases, each recorded in raft: every node trusts the current and the next CA " +
			"(TLS and Nebula; nothing restarts), then the CA holder signs with the next CA and every certificate " +
			"is reissued under it as its renewal comes due, or at once with --now. The old CA leaves the bundles " +
			"only when no live certificate and no unexpired token depends on it; `meshctl ca status` shows what " +
			"still does. Tokens minted during the rotation pin both CAs; a token minted before it still joins. " +
			"A member that does not report a phase within 30s stops the rotation with X504239CAROTS naming it; " +
			"run rotate again to resume. With --dual-stack an IPv4-only cluster (v1 certificates) moves to v2 " +
			"certificates and a dual-stack overlay: every node gets an IPv6 overlay address when the rotation " +
			"begins, and the next CA's certificates hold both; nodes on v1 and v2 certificates reach each other " +
			"over IPv4 throughout, and `meshctl ca status` counts the nodes on v2.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			if (req.OverlayCIDR6 != "" || req.Overlay6Global) && !req.DualStack {
				return usageError{errors.New("--overlay-cidr6 and --overlay6-global go with --dual-stack")}
			}
			st, err := a.client().RotateCA(cmd.Context(), req)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(st)
			}
			a.printCAStatus(st)
			return nil
		},
	}
	rotate.Flags().BoolVar(&req.Now, "now", false, "reissue every certificate under the next CA at once")
	rotate.Flags().BoolVar(&req.DualStack, "dual-stack", false, "move an IPv4-only cluster to v2 certificates and a dual-stack overlay")
	rotate.Flags().StringVar(&req.OverlayCIDR6, "overlay-cidr6", "", "with --dual-stack: the IPv6 overlay `PREFIX`, a /64 in fd00::/8 (default: a generated ULA /64)")
	rotate.Flags().BoolVar(&req.Overlay6Global, "overlay6-global", false, "with --dual-stack: take an --overlay-cidr6 outside fd00::/8")
	a.addOutput(rotate)
	return rotate
}

func (a *app) caStatusCommand() *cobra.Command {
	status := &cobra.Command{
		Use:   "status",
		Short: "Show the CA rotation's phase and what still depends on the old CA (control nodes)",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			st, err := a.client().CAStatus(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(st)
			}
			a.printCAStatus(st)
			return nil
		},
	}
	a.addOutput(status)
	return status
}

func (a *app) printCAStatus(st *apitype.CAStatus) {
	short := func(fp string) string {
		if len(fp) < 16 {
			return fp
		}
		return fp[:16]
	}
	a.out.Printf("phase:    %s\n", st.Phase)
	a.out.Printf("current:  sha256:%s\n", short(st.Current))
	if st.Next != "" {
		a.out.Printf("next:     sha256:%s (since %s%s)\n", short(st.Next), st.Started.UTC().Format(time.RFC3339),
			map[bool]string{true: ", --now", false: ""}[st.Now])
	}
	a.out.Printf("signing:  sha256:%s\n", short(st.Signing))
	switch {
	case st.Moving:
		a.out.Printf("overlay:  %s, moving to v2 certificates and %s: %d of %d active nodes on v2\n", st.Overlay, st.Overlay6, st.DualStack, st.Active)
	case st.Overlay6 != "":
		a.out.Printf("overlay:  %s %s (v2 certificates: %d of %d active nodes)\n", st.Overlay, st.Overlay6, st.DualStack, st.Active)
	case st.Overlay != "":
		a.out.Printf("overlay:  %s (IPv4 only, v1 certificates; `meshctl ca rotate --dual-stack` moves to v2)\n", st.Overlay)
	}
	if st.Holder != "" {
		a.out.Printf("holder:   %s\n", st.Holder)
	}
	if !st.Rotated.IsZero() {
		a.out.Printf("last rotation finished: %s\n", st.Rotated.UTC().Format(time.RFC3339))
	}
	if st.Phase == "none" {
		return
	}
	deps := len(st.Certificates) + len(st.Members) + len(st.Tokens)
	if deps == 0 {
		a.out.Printf("nothing depends on the old CA any more\n")
		return
	}
	a.out.Printf("still depending on the old CA (%d):\n", deps)
	for _, l := range [][]string{st.Certificates, st.Members, st.Tokens} {
		for _, item := range l {
			a.out.Printf("  %s\n", item) // one line each: Printf makes every argument one safe line
		}
	}
}
