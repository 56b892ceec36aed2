// Command meshd is the mesh agent daemon. It serves the local API on a unix
// socket at once, and runs raft, the enroll listener and (with later
// components) gossip and the overlay once this node is a cluster member.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/coreos/go-systemd/v22/journal"

	"github.com/meshd/meshd/agent"
	"github.com/meshd/meshd/codes"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("meshd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "/etc/meshd/meshd.yaml", "config file (a missing default file means defaults)")
	stateDir := fs.String("state-dir", "", "state directory (overrides state_dir)")
	socket := fs.String("socket", "", "local API socket (overrides socket)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Fprintln(os.Stdout, version)
		return 0
	}
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "config" })
	cfg, err := agent.LoadConfig(*configPath, explicit)
	if err == nil {
		if *stateDir != "" {
			cfg.StateDir = *stateDir
		}
		if *socket != "" {
			cfg.Socket = *socket
		}
		err = cfg.Validate()
	}
	if err != nil {
		return fail(stderr, err)
	}
	underJournal, _ := journal.StderrIsJournalStream()
	log := cfg.NewLogger(stderr, !underJournal)
	a, err := agent.New(cfg, agent.Deps{
		Log: log, LogOutput: stderr, Version: version,
		Notify: func(s string) { _, _ = daemon.SdNotify(false, s+"=1") },
	})
	if err != nil {
		return fail(stderr, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := a.Run(ctx); err != nil {
		return fail(stderr, err)
	}
	return 0
}

// fail prints a startup failure as every meshd failure is printed: code and
// cause, remedy, detail.
func fail(stderr io.Writer, err error) int {
	c := codes.OrInternal(err)
	fmt.Fprintf(stderr, "%s: %s\nremedy: %s\ndetail: %v\n", c, c.Cause(), c.Remedy(), err)
	var ce *agent.ConfigError
	if errors.As(err, &ce) {
		fmt.Fprintf(stderr, "field: %s\n", ce.Field)
	}
	return 1
}
