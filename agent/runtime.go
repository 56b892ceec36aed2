package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/fetched"
	"github.com/meshd/meshd/agent/raftnode"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/mesh"
	"github.com/meshd/meshd/pki"
)

// runtime is everything a member node runs: for a control node raft and the
// control listener (enroll and internal API). It is started from the state
// dir and stopped in reverse order.
type runtime struct {
	facts *statedir.Facts
	// live is the identity the node presents now; a renewed TLS leaf or
	// Nebula cert is swapped in (idMu serialises those changes) and the
	// TLS listeners and clients use it at their next handshake.
	idMu sync.Mutex
	live *pki.LiveIdentity
	// ctl is the control plane: raft, the internal API's server side,
	// admission and signing. Only control nodes have one; this is where a
	// node's role shows, decided once in startRuntime.
	ctl    *control.Plane
	client *control.Client // calls control nodes' internal API (every node)
	ports  config.Ports
	log    *slog.Logger
	now    func() time.Time

	control   *http.Server
	controlLn net.Listener
	wg        sync.WaitGroup

	// overlay and membership
	meshBase    mesh.Config // from meshd.yaml and the facts; meshConfig adds identity and peers
	policyMu    sync.Mutex
	overlay     config.Policy // firewall and MTU in force (firewall.go), guarded by policyMu
	mesh        *mesh.Mesh
	appliedMu   sync.Mutex
	meshApplied mesh.Config  // guarded by appliedMu
	lastReload  time.Time    // when reconcileOverlay last reloaded Nebula (the overlay loop's own)
	overlayErr  atomic.Value // errBox: the last reload refusal, for status
	gossip      *gossip.Gossip
	kick        chan struct{} // wakes the overlay loop (poke)
	// The follow loop (reconcile.go): its steps, decided at start, and
	// what wakes it with which notifications to answer.
	steps      []followStep
	followKick chan struct{}
	followMu   sync.Mutex
	followTold told
	// loopCtx is the context of the runtime's goroutines (spawn); stop
	// cancels it with loops and waits for them (wg).
	loopCtx context.Context
	loops   context.CancelFunc

	// cluster is where the node's cluster facts come from (facts.go):
	// its raft on a control node, fetched copies on a worker.
	cluster clusterFacts
	// renewOthers signs the TLS leaves that are due, on a control node
	// (the CA holder signs, the others forward); nil on a worker.
	renewOthers func(context.Context) time.Time
	keys        keyState // the gossip keyring this node runs
	// keyReport wakes runKeyReports: the keyring changed (buffered 1).
	keyReport chan struct{}
	// caReport wakes runCAReports (buffered 1); ca is a worker's view of
	// the CA bundle (carotation.go).
	caReport chan struct{}
	ca       caFollow

	ignoredMu sync.Mutex
	ignored   map[string]string // gossip members reported ignored, and why (logged once per change)

	stateDir string
	parked   *parkedMesh // userspace mode: where stop parks the overlay it cannot stop
}

// startRuntime starts a member node's components from its state dir. If
// boot is non-nil this is init: raft is bootstrapped with this node as the
// single voter and boot is the first entry it commits.
func (a *Agent) startRuntime(ctx context.Context, facts *statedir.Facts, boot *state.Bootstrap) (_ *runtime, err error) {
	dir := a.cfg.StateDir
	id, err := pki.LoadIdentity(filepath.Join(dir, statedir.IdentityDir))
	if err != nil {
		return nil, statedir.Corrupt(err)
	}
	live, err := pki.NewLiveIdentity(id)
	if err != nil {
		return nil, codes.Wrap(codes.StateDir, err)
	}
	loadHeld(dir, live, a.log) // a CA rotation's leaf under the old CA (carotation.go)
	rt := &runtime{facts: facts, live: live, ports: a.cfg.Ports, log: a.log, now: a.d.Now,
		meshBase: a.cfg.MeshBase(facts.Role, facts.Underlay), overlay: a.startPolicy(), kick: make(chan struct{}, 1), followKick: make(chan struct{}, 1), keyReport: make(chan struct{}, 1), caReport: make(chan struct{}, 1),
		ca:       caFollow{wake: make(chan struct{}, 1)},
		stateDir: a.cfg.StateDir, parked: a.parked}
	defer func() {
		if err != nil {
			rt.stop()
		}
	}()
	if rt.client, err = control.NewLiveClient(live); err != nil {
		return nil, err
	}
	// Until its raft opens, a control node knows what a worker knows
	// before its first node list: the seeds and lighthouses its join
	// named. A worker reads the list it saved before a restart.
	copies := fetched.New(rt.client, facts.NodeID, facts.Seeds, rt.stateDir, a.log)
	if facts.Role != pki.RoleControl {
		if err := copies.Load(); err != nil {
			return nil, err
		}
	}
	rt.cluster = copies
	// Start order (STYLE §4): mesh, gossip, raft, listeners, loops.
	if err := rt.startMesh(); err != nil {
		return nil, err
	}
	if err := a.startGossip(ctx, rt); err != nil {
		return nil, err
	}
	if facts.Role == pki.RoleControl {
		if err := a.startControlPlane(ctx, rt, boot); err != nil {
			return nil, err
		}
		rt.cluster = planeFacts{p: rt.ctl, nodeID: facts.NodeID, seeds: facts.Seeds}
		rt.renewOthers = rt.ctl.RenewTLSCerts
		rt.steps = rt.followSteps(rt.controlDuties())
		if err := a.startControl(rt); err != nil {
			return nil, err
		}
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	rt.loopCtx, rt.loops = loopCtx, cancel
	if rt.steps == nil {
		rt.steps = rt.followSteps(nil) // a worker: fetches only
	}
	rt.spawn(func(ctx context.Context) { rt.runReconcile(ctx, a.cfg.ReconcileInterval) })
	rt.spawn(func(ctx context.Context) { rt.runFollow(ctx, a.cfg.ReconcileInterval) })
	rt.spawn(func(ctx context.Context) { rt.runTLSRenewal(ctx, a.cfg.ReconcileInterval) })
	rt.spawn(func(ctx context.Context) { rt.runRejoin(ctx, a.cfg.ReconcileInterval) })
	rt.spawn(rt.answerQueries)
	rt.spawn(rt.runKeyReports)
	rt.spawn(rt.runCAReports)
	if rt.ctl == nil {
		rt.spawn(rt.runTunnelReports) // tunnels.go
	}
	a.startOverlayMetrics(loopCtx, rt)
	return rt, nil
}

// startControlPlane opens raft (bootstrapping it with boot on init), loads
// the CA on the CA holder, and builds the control plane over them.
func (a *Agent) startControlPlane(ctx context.Context, rt *runtime, boot *state.Bootstrap) error {
	serverTLS, err := pki.LiveServerTLSConfig(rt.live, pki.RoleControl)
	if err != nil {
		return err
	}
	clientTLS, err := pki.LiveClientTLSConfig(rt.live, pki.RoleControl)
	if err != nil {
		return err
	}
	advertise := &net.TCPAddr{IP: rt.facts.Underlay.AsSlice(), Port: a.cfg.Ports.Raft}
	bind := net.JoinHostPort(a.cfg.BindAddr, strconv.Itoa(a.cfg.Ports.Raft))
	stream, err := raftnode.NewTLSStreamLayer(bind, advertise, serverTLS, clientTLS)
	if err != nil {
		return fmt.Errorf("listen raft %s: %w", bind, err)
	}
	dir := filepath.Join(a.cfg.StateDir, statedir.RaftDir)
	if boot != nil && raftnode.HasState(dir) {
		_ = stream.Close()
		return codes.Wrap(codes.AlreadyInitialised, errors.New("raft state exists; refusing to bootstrap over it"))
	}
	ca, nextCA, err := a.loadCA(rt)
	if err != nil {
		_ = stream.Close()
		return err
	}
	node, err := raftnode.Open(raftnode.Options{Dir: dir, NodeID: rt.facts.NodeID, Stream: stream,
		Timing: a.cfg.RaftNodeTiming(), Log: a.log,
		ObserveApply: a.met.ObserveRaftApply})
	if err != nil {
		return err
	}
	rt.ctl = control.New(a.cfg.ControlConfig(rt.facts.NodeID, rt.facts.Name, filepath.Join(a.cfg.StateDir, statedir.CADir)), node, ca, rt.client, control.Deps{Log: a.log, Now: a.d.Now, Hooks: rt.controlHooks()})
	if nextCA != nil {
		rt.ctl.AddCA(nextCA) // a rotation's next CA (carotation.go)
	}
	if boot == nil {
		return nil
	}
	if err := node.Bootstrap(advertise); err != nil {
		return fmt.Errorf("bootstrap raft: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := node.WaitLeader(wctx); err != nil {
		return err
	}
	return node.Apply(wctx, boot)
}

// controlHooks connect the control plane to this node's overlay and
// gossip.
func (rt *runtime) controlHooks() control.Hooks {
	return control.Hooks{
		Poke:          rt.wake,
		NotifyRevoked: func() error { return rt.gossip.Notify(notifyRevoked) },
		ForceLeave:    func(name string) error { return rt.gossip.ForceLeave(name) },
		Gossip:        rt.gossipMembers,
		Versions:      rt.gossipVersions,
		LastSeen:      rt.gossip.LastSeen,
		NotifyKeys:    func() error { return rt.gossip.Notify(notifyKeys) },
		NotifyCA:      func() error { return rt.gossip.Notify(notifyCA) },
		KeyReports:    rt.keyReports,
		AskMembers:    rt.gossip.Ask,
		Tunnels:       rt.tunnels,
	}
}

func (a *Agent) startControl(rt *runtime) error {
	tlsConf, err := pki.LiveServerTLSConfig(rt.live)
	if err != nil {
		return err
	}
	bind := net.JoinHostPort(a.cfg.BindAddr, strconv.Itoa(a.cfg.Ports.Control))
	limits := a.cfg.PortLimits()
	ln, err := control.Listen(bind, tlsConf, limits, a.log.With("component", "control"))
	if err != nil {
		return fmt.Errorf("listen control %s: %w", bind, err)
	}
	es := enroll.NewServer(a.cfg.EnrollConfig(), rt.ctl.Ledger(), rt.ctl.Signer(),
		enroll.Deps{Log: a.log, Now: a.d.Now, Observe: a.met.ObserveJoin})
	rt.control = control.NewServer(rt.ctl.Handler(es), limits, a.log.With("component", "control"))
	rt.control.ConnState = rt.ctl.TrackConn // non-members' open connections are closed
	rt.controlLn = ln
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		if err := rt.control.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("control listener stopped", "err", err)
		}
	}()
	return nil
}

// spawn runs f in the runtime's wait group with the loops' context: stop
// cancels it and waits for f to return. Every goroutine a runtime starts
// goes through here (or adds itself to wg for a listener it serves).
func (rt *runtime) spawn(f func(ctx context.Context)) {
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		f(rt.loopCtx)
	}()
}

// stop stops the components in reverse order of start.
func (rt *runtime) stop() {
	if rt.loops != nil {
		rt.loops()
	}
	if rt.control != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_ = rt.control.Shutdown(ctx)
		cancel()
	}
	rt.wg.Wait()
	if rt.client != nil {
		rt.client.CloseIdle()
	}
	if rt.ctl != nil {
		if err := rt.ctl.Close(); err != nil {
			rt.log.Warn("raft shutdown", "err", err)
		}
	}
	if rt.gossip != nil {
		if err := rt.gossip.Shutdown(); err != nil {
			rt.log.Warn("gossip shutdown", "err", err)
		}
	}
	if rt.mesh != nil && rt.parked != nil {
		rt.parked.park(rt.mesh, rt.applied(), rt.log)
	} else if rt.mesh != nil {
		rt.mesh.Stop()
	}
}

// identity is this node's current identity.
func (rt *runtime) identity() *pki.Identity { return rt.live.Identity() }

// overlayAddr is this node's overlay address without the prefix length.
func (rt *runtime) overlayAddr() netip.Addr { return rt.facts.Overlay.Addr() }
