package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/meshd/meshd/agent/apitype"
)

func (a *app) caRotateCommand() *cobra.Command {
	var now bool
	rotate := &cobra.Command{
		Use:   "rotate [--now]",
		Short: "Replace the cluster's CAs without an outage (on the CA holder)",
		Long: "rotate creates the next CA pair on the CA holder (its keys never leave it) and takes the cluster " +
			"through the rotation's phases, each recorded in raft: every node trusts the current and the next CA " +
			"(TLS and Nebula; nothing restarts), then the CA holder signs with the next CA and every certificate " +
			"is reissued under it as its renewal comes due, or at once with --now. The old CA leaves the bundles " +
			"only when no live certificate and no unexpired token depends on it; `meshctl ca status` shows what " +
			"still does. Tokens minted during the rotation pin both CAs; a token minted before it still joins. " +
			"A member that does not report a phase within 30s stops the rotation with X504239CAROTS naming it; " +
			"run rotate again to resume.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			st, err := a.client().RotateCA(cmd.Context(), now)
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
	rotate.Flags().BoolVar(&now, "now", false, "reissue every certificate under the next CA at once")
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
