// Command meshd is the mesh agent daemon. It serves the local API on a unix
// socket at once, and runs raft, the enroll listener and (with later
// components) gossip and the overlay once this node is a cluster member.
//
// Under systemd (Type=notify) it sends READY=1 once its socket and state are
// up, RELOADING=1 (with MONOTONIC_USEC) and READY=1 around a config reload
// (SIGHUP or `meshctl reload`), STOPPING=1 on SIGTERM, and WATCHDOG=1 only
// while Agent.Healthy says its loops answer.
package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/coreos/go-systemd/v22/journal"

	"github.com/meshd/meshd/agent"
	"github.com/meshd/meshd/agent/apitype"
)

// version and commit are set at build time with -ldflags "-X main.version=...
// -X main.commit=..." (the Makefile does); without them the Go toolchain's
// record is read (apitype.NewBuild).
var (
	version = "dev"
	commit  = ""
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is one meshd invocation: the daemon, or one of the commands that
// print and exit without touching any path (cli.go). It returns the exit
// code: 0, 1 a coded failure, 2 a usage mistake.
func run(args []string, stdout, stderr io.Writer) int {
	fs, fl := daemonFlags(stderr)
	if code, done := dispatch(fs, fl, args, stdout, stderr); done {
		return code
	}
	tuneGC()
	// Catch SIGHUP first: its default action would kill a meshd that is
	// still starting when systemd (or an admin) asks for a reload.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	// readConfig is used at start and again by every reload, so flags
	// override the file the same way both times.
	readConfig := fl.readConfig
	cfg, err := readConfig()
	if err != nil {
		return fail(stderr, err)
	}
	underJournal, _ := journal.StderrIsJournalStream()
	log, level := cfg.NewDaemonLogger(stderr, underJournal)
	routeStdLog(log)
	build := apitype.NewBuild(version, commit)
	a, err := agent.New(cfg, agent.Deps{
		Log: log, Version: build.Version, Commit: build.Commit,
		Notify: notify, LevelVar: level, ReadConfig: readConfig,
	})
	if err != nil {
		return fail(stderr, err)
	}
	prof := startProfiles(stderr)
	defer prof.stop(stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first SIGTERM/SIGINT, a second one kills at once.
	context.AfterFunc(ctx, stop)

	var wg sync.WaitGroup
	defer wg.Wait()
	loops, cancelLoops := context.WithCancel(ctx)
	defer cancelLoops()
	wg.Go(func() { reloadOnHUP(loops, a, hup) })
	if interval, _ := daemon.SdWatchdogEnabled(false); interval > 0 {
		wg.Go(func() { watchdog(loops, a, interval, log) })
	}
	if err := a.Run(ctx); err != nil {
		return fail(stderr, err)
	}
	return 0
}

// notify sends one sd_notify state; RELOADING carries MONOTONIC_USEC as
// systemd asks. Without NOTIFY_SOCKET it does nothing.
func notify(state string) {
	msg := state + "=1"
	if state == "RELOADING" {
		msg += "\n" + daemon.SdNotifyMonotonicUsec()
	}
	_, _ = daemon.SdNotify(false, msg)
}

// reloadOnHUP reloads the config on every SIGHUP. Reload logs what it
// applied, what needs a restart, and a refused config with its code.
func reloadOnHUP(ctx context.Context, a *agent.Agent, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			_, _ = a.Reload()
		}
	}
}

// watchdog pings systemd every third of the watchdog interval, but only
// after a health probe passed: a meshd whose loops hang stops pinging and
// systemd restarts it.
func watchdog(ctx context.Context, a *agent.Agent, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval / 3)
	defer t.Stop()
	healthy := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, interval/3)
		err := a.Healthy(pctx)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			if healthy {
				log.Warn("health probe failed; withholding watchdog pings", "err", err)
			}
			healthy = false
			continue
		case !healthy:
			log.Info("health probe passes again; watchdog pings resume")
			healthy = true
		}
		_, _ = daemon.SdNotify(false, daemon.SdNotifyWatchdog)
	}
}
