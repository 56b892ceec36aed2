package main

import (
	"github.com/spf13/cobra"

	"github.com/meshd/meshd/agent/apitype"
)

func (a *app) reloadCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reload",
		Short: "Make meshd re-read its config file",
		Long: "reload makes meshd re-read and validate its config file, as `systemctl reload meshd` (SIGHUP) does. " +
			"A config that does not validate is refused with its code and the running config stays. " +
			"log_level, the overlay firewall (firewall.inbound, firewall.outbound) and overlay_mtu apply at once, without restarting Nebula; " +
			"other changed fields are named in a restart-needed warning.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			asJSON, err := a.json()
			if err != nil {
				return err
			}
			ws, err := a.client().Reload(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if ws == nil {
					ws = []apitype.Warning{}
				}
				return a.printJSON(map[string]any{"warnings": ws})
			}
			a.warn(ws)
			a.out.Println("config reloaded")
			return nil
		},
	}
	a.addOutput(cmd)
	return cmd
}
