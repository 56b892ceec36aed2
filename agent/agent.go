package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/localapi"
	"github.com/meshd/meshd/agent/member"
	"github.com/meshd/meshd/agent/metrics"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
)

// Deps are the agent's collaborators.
type Deps struct {
	Log     *slog.Logger
	Now     func() time.Time // nil: time.Now
	Version string
	Commit  string // the VCS commit meshd was built from (GET /v0/version)
	// Notify is told "READY", "RELOADING", "STOPPING" (sd_notify); may be nil.
	Notify func(state string)
	// LevelVar, if set, is the level Log filters on; Reload sets it from
	// log_level. ReadConfig re-reads the config file meshd was started with
	// (flag overrides applied) for Reload; nil refuses a reload.
	LevelVar   *slog.LevelVar
	ReadConfig func() (config.File, error)
	// MachineIDPath is the machine-id file the clone check reads; empty
	// means DefaultMachineIDPath. Only tests set it (cmd/meshd never does;
	// the e2e suite bind-mounts another /etc/machine-id instead).
	MachineIDPath string
}

// phase is what the local API reports as status.state.
type phase string

const (
	phaseStarting phase = "starting"
	phaseUnjoined phase = "unjoined"
	phaseRunning  phase = "running"
	// phaseRefused: the state dir holds a member that this machine must
	// not run (a clone: codes.ClonedIdentity); the socket serves status
	// and a `join --force` that replaces the identity, nothing else.
	phaseRefused phase = "refused"
	// phaseStopping: from SIGTERM (Run's context ending) to the socket
	// closing; every route that needs the runtime answers
	// codes.DaemonStopping, retryable, never "not in a cluster".
	phaseStopping phase = "stopping"
)

// Agent is the meshd daemon.
type Agent struct {
	cfg config.File
	log *slog.Logger
	d   Deps

	// op serialises init, join and leave; a second one gets codes.Busy.
	op chan struct{}

	mu    sync.Mutex
	phase phase
	rt    *member.Runtime // nil until this node is a running member
	// refused is why the member in the state dir did not start, and
	// refusedFacts its node.json (phaseRefused only).
	refused      error
	refusedFacts *statedir.Facts

	parked *member.Parked // userspace mode: the overlay a stopped runtime left running
	// seeds are the seeds' TLS sessions a join's connections resume
	// (enroll/sessions.go).
	seeds tls.ClientSessionCache
	// reloaded is the firewall and MTU of the last reload (firewall.go),
	// nil before one; guarded by mu.
	reloaded *config.Policy

	met *metrics.Set // metrics.go: the registry

	// finishing serialises step 10 of a join (finishJoin): the join
	// itself, the same join run again, and a restart that resumes it.
	finishing sync.Mutex
}

// New validates cfg and returns an agent that has not started anything.
func New(cfg config.File, d Deps) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Log == nil {
		d.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Notify == nil {
		d.Notify = func(string) {}
	}
	a := &Agent{cfg: cfg, log: d.Log, d: d, op: make(chan struct{}, 1), phase: phaseStarting, seeds: enroll.NewSessions()}
	a.met = metrics.New(d.Version, a.metricsState)
	if cfg.OverlayMode == config.OverlayUserspace {
		a.parked = &member.Parked{}
	}
	return a, nil
}

// Run serves until ctx is cancelled. The local socket opens first so that
// meshctl sees "starting" rather than "connection refused"; then the state
// dir is read and, if this node is a member, its runtime starts. A restart
// is not a departure: cancelling ctx stops everything and leaves the cluster
// as it was.
func (a *Agent) Run(ctx context.Context) error {
	// The state dir's lock comes before the socket: a second meshd on the
	// same state dir must not replace the first one's socket either.
	if err := statedir.Ensure(a.cfg.StateDir); err != nil {
		return err
	}
	lock, err := statedir.TakeLock(a.cfg.StateDir)
	if err != nil {
		return err
	}
	defer lock.Release()
	ln, err := localapi.Listen(a.cfg.Socket, a.cfg.SocketGroup, a.log)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           a.localHandler(),
		ReadHeaderTimeout: 10 * time.Second,
		ConnContext:       localapi.PeerCredContext,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	defer func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
		<-serveErr
	}()

	if _, loopback, _ := a.cfg.MetricsListen(); loopback { // the overlay's: startOverlayMetrics
		mln, err := net.Listen("tcp", a.cfg.MetricsAddr)
		if err != nil {
			return codes.Wrap(codes.ConfigInvalid, fmt.Errorf("metrics_addr %s: %w", a.cfg.MetricsAddr, err))
		}
		mctx, mcancel := context.WithCancel(ctx)
		metricsDone := make(chan error, 1)
		go func() { metricsDone <- a.met.Serve(mctx, mln) }()
		defer func() {
			mcancel()
			if err := <-metricsDone; err != nil {
				a.log.Warn("metrics listener", "err", err)
			}
		}()
	}
	if err := a.start(ctx); err != nil {
		a.log.Error("meshd could not start", "code", codes.OrInternal(err), "err", err)
		return err
	}
	a.d.Notify("READY")
	a.log.Info("meshd ready", "state", string(a.currentPhase()), "socket", a.cfg.Socket, "version", a.d.Version)

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("local API stopped", "err", err)
		}
	}
	a.mu.Lock()
	a.phase = phaseStopping
	a.mu.Unlock()
	a.d.Notify("STOPPING") // after the phase: from here every route answers DaemonStopping
	a.log.Info("meshd stopping")
	a.stopRuntime()
	return nil
}

// start reads the state dir and starts the runtime of a member node.
func (a *Agent) start(ctx context.Context) error {
	if err := statedir.Ensure(a.cfg.StateDir); err != nil {
		return err
	}
	facts, err := statedir.Load(a.cfg.StateDir)
	if err != nil {
		return err
	}
	if facts == nil {
		a.setPhase(phaseUnjoined, nil)
		return nil
	}
	if err := statedir.CheckMachine(a.cfg.StateDir, facts, a.machineIDPath(), a.log); err != nil {
		if codes.Of(err) != codes.ClonedIdentity {
			return err
		}
		// Not an exit: the socket stays, so `meshctl status` says why and
		// `meshctl join --force` can give this machine its own identity.
		a.log.Error("refusing to run this node: its state dir was made on another machine; gossip and the overlay are not started",
			"code", codes.ClonedIdentity, "node", facts.Name, "err", err)
		a.mu.Lock()
		a.phase, a.rt, a.refused, a.refusedFacts = phaseRefused, nil, err, facts
		a.mu.Unlock()
		return nil
	}
	if err := a.cfg.CheckMetricsOverlay(facts.Overlay.Addr()); err != nil {
		return err
	}
	rt, err := a.startRuntime(ctx, facts, runtimeStart{})
	if err != nil {
		return fmt.Errorf("start %s: %w", facts, err)
	}
	a.setPhase(phaseRunning, rt)
	if _, ok := statedir.UnconfirmedJoin(a.cfg.StateDir); ok {
		rt.Spawn(func(ctx context.Context) { joiner{a}.resumeJoin(ctx, rt) }) // stop waits for it
	}
	return nil
}

func (a *Agent) setPhase(p phase, rt *member.Runtime) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.phase, a.rt, a.refused, a.refusedFacts = p, rt, nil, nil
}

func (a *Agent) currentPhase() phase {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.phase
}

// serving is nil while meshd takes requests that change it, else why
// not: codes.DaemonStarting before the state dir is read,
// codes.DaemonStopping from SIGTERM on (both retryable).
func (a *Agent) serving() error {
	switch a.currentPhase() {
	case phaseStarting:
		return codes.Wrap(codes.DaemonStarting, nil)
	case phaseStopping:
		return codes.Wrap(codes.DaemonStopping, nil)
	}
	return nil
}

// running returns the runtime of a member node, or codes.NotInCluster
// (codes.DaemonStarting, codes.DaemonStopping while it has none yet or
// any more).
func (a *Agent) running() (*member.Runtime, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.phase == phaseStarting:
		return nil, codes.Wrap(codes.DaemonStarting, nil)
	case a.phase == phaseStopping:
		return nil, codes.Wrap(codes.DaemonStopping, nil)
	case a.phase == phaseRefused:
		return nil, a.refused
	case a.rt == nil:
		return nil, codes.Wrap(codes.NotInCluster, nil)
	}
	return a.rt, nil
}

// controlPlane is the running node's control plane; a worker has none
// (codes.NotControl).
func (a *Agent) controlPlane() (*control.Plane, error) {
	rt, err := a.running()
	if err != nil {
		return nil, err
	}
	if rt.Plane() == nil {
		return nil, codes.Wrap(codes.NotControl, fmt.Errorf("%s is a %s node", rt.Facts().Name, rt.Facts().Role))
	}
	return rt.Plane(), nil
}

// nodeArg is the node a command names as name: its DNS name
// (w1.prod.mesh) is the node's name (member.Runtime.NodeName).
func (a *Agent) nodeArg(name string) string {
	rt, err := a.running()
	if err != nil {
		return name
	}
	return rt.NodeName(name)
}

func (a *Agent) stopRuntime() {
	a.mu.Lock()
	rt := a.rt
	a.rt = nil
	a.mu.Unlock()
	if rt != nil {
		rt.Stop()
	}
}

// beginOp takes the single init/join/leave slot or fails with codes.Busy.
func (a *Agent) beginOp() (func(), error) {
	select {
	case a.op <- struct{}{}:
		return func() { <-a.op }, nil
	default:
		return nil, codes.Wrap(codes.Busy, nil)
	}
}

// runtimeStart is what init and join know that a restart does not.
type runtimeStart struct {
	boot *state.Bootstrap // init's first raft entry
	nat  member.NAT       // what a join's path check found (member.Options.NAT)
}

// startRuntime starts this node's member runtime from its state dir
// (member.Start); st is empty on a restart.
func (a *Agent) startRuntime(ctx context.Context, facts *statedir.Facts, st runtimeStart) (*member.Runtime, error) {
	return member.Start(ctx, member.Options{Config: a.cfg, Facts: facts, Boot: st.boot, Policy: a.startPolicy(),
		Parked: a.parked, Metrics: a.met, Version: a.d.Version, Log: a.log, Now: a.d.Now, NAT: st.nat})
}
