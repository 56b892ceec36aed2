package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// commit is set at build time with -ldflags "-X main.commit=..."; without
// it (and without a version), the Go toolchain's record is read instead
// (apitype.NewBuild).
var commit = ""

// versionJSON is `meshctl version -o json`. Daemon is null when meshd could
// not be asked; DaemonError then says why.
type versionJSON struct {
	Client      apitype.Build     `json:"client"`
	Daemon      *apitype.Build    `json:"daemon"`
	DaemonError *apitype.Error    `json:"daemon_error,omitempty"`
	Warnings    []apitype.Warning `json:"warnings"`
}

// versionCommand is `meshctl version`: this meshctl's build and the
// daemon's (GET /v0/version), with a VersionMismatch warning when they
// differ. Without a daemon it prints the client's, says the daemon is
// unreachable, and fails as every command does without one (exit 3), so
// a script can tell "both known" from "only the client known".
func (a *app) versionCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print meshctl's and meshd's versions, commits and Go versions",
		Long: "version prints this meshctl's version, commit and Go version, then the running meshd's (asked over the local socket), " +
			"and warns (" + string(codes.VersionMismatch) + ") when they are different builds. " +
			"Without a daemon it prints meshctl's and exits 3 (daemon unreachable).",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			out := versionJSON{Client: apitype.NewBuild(version, commit), Warnings: []apitype.Warning{}}
			d, derr := a.client().DaemonVersion(cmd.Context())
			if derr == nil {
				out.Daemon = &d
				if out.Client.Differs(d) {
					out.Warnings = append(out.Warnings, apitype.Warning{Code: codes.VersionMismatch,
						Detail: fmt.Sprintf("meshctl %s, meshd %s", out.Client, d)})
				}
			} else {
				c := codes.OrInternal(derr)
				out.DaemonError = apitype.NewError(c, derr)
			}
			if asJSON {
				if err := a.printJSON(out); err != nil {
					return err
				}
				return derr
			}
			a.out.Printf("client: meshctl %s\n", out.Client)
			if derr != nil {
				a.out.Printf("daemon: unreachable (%s)\n", out.DaemonError.ErrCode)
				return derr
			}
			a.out.Printf("daemon: meshd %s\n", d)
			a.warn(out.Warnings)
			return nil
		},
	}
	a.addOutput(cmd)
	return cmd
}
