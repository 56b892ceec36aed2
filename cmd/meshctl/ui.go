package main

import (
	"context"
	"os/exec"
	"time"

	"github.com/spf13/cobra"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/console"
)

// uiCommand is `meshctl ui`: the web console (package console) on a
// loopback port, until meshctl stops.
func (a *app) uiCommand() *cobra.Command {
	var (
		addr string
		open bool
	)
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "Serve the web console on a loopback port until interrupted",
		Long: "ui serves a web console for this cluster on 127.0.0.1 (a free port unless --addr says otherwise; " +
			"only loopback addresses are accepted) and prints its URL. The URL carries a one-time secret: the " +
			"first browser that opens it gets a session cookie, and every request without that cookie is refused. " +
			"The console talks to meshd through the same socket as meshctl, with the rights of the user who runs it; " +
			"meshd opens no port for it. It stops when meshctl stops (Ctrl-C).",
		Example: "  meshctl ui                 # prints http://127.0.0.1:PORT/?token=...\n" +
			"  meshctl ui --open          # and opens it with xdg-open\n" +
			"  ssh -L 8080:127.0.0.1:8080 host meshctl ui --addr 127.0.0.1:8080   # from another machine",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			srv, err := console.Listen(addr, a.client())
			if err != nil {
				return err
			}
			a.out.Printf("meshctl ui: the console is at http://%s/ until this command stops (Ctrl-C)\n", srv.Addr())
			a.out.Println("open this URL; its secret works once, in the first browser that opens it:")
			a.out.Printf("  %s\n", srv.URL())
			a.checkDaemon(cmd.Context())
			if open {
				a.open(srv.URL())
			}
			return srv.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&addr, "addr", console.DefaultAddr, "loopback `HOST:PORT` to serve on (port 0: a free one)")
	cmd.Flags().BoolVar(&open, "open", false, "open the URL with xdg-open (never done without this flag)")
	return cmd
}

// checkDaemon asks meshd for its status once: the console runs either way
// (meshd may be starting), but a console that cannot reach meshd, or may not,
// says so at once rather than only on its pages.
func (a *app) checkDaemon(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := a.client().Status(ctx); err != nil {
		c := codes.OrInternal(err)
		a.errOut.Printf("warning %s: %s\nremedy: %s\n(the console runs, and shows this on its pages until it is fixed)\n", c, c.Cause(), c.Remedy())
	}
}

// open hands url to xdg-open when there is one; the console runs either way.
func (a *app) open(url string) {
	path, err := exec.LookPath("xdg-open")
	if err != nil {
		a.errOut.Println("--open: no xdg-open here; open the URL above by hand")
		return
	}
	c := exec.Command(path, url)
	if err := c.Start(); err != nil {
		a.errOut.Printf("--open: %v; open the URL above by hand\n", err)
		return
	}
	go func() { _ = c.Wait() }() // reaps xdg-open, which returns once the browser has the URL
}
