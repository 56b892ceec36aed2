package member

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/desired"
	"github.com/meshd/meshd/agent/fetched"
	"github.com/meshd/meshd/agent/metrics"
	"github.com/meshd/meshd/agent/pathup"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/mesh"
	"github.com/meshd/meshd/netcheck"
	"github.com/meshd/meshd/pki"
)

// Options are what a member's runtime starts with.
type Options struct {
	Config config.File
	Facts  *statedir.Facts
	// Boot, on init, is the first raft entry: raft is bootstrapped with
	// this node as its single voter and Boot is committed before Start
	// returns. nil for every other start.
	Boot *state.Bootstrap
	// Policy is the overlay firewall and MTU to start with (the last
	// reload's, else the config's).
	Policy config.Policy
	// Parked is where a userspace overlay a stopped runtime could not
	// stop waits for the next one; nil in kernel mode.
	Parked  *Parked
	Metrics *metrics.Set
	Version string
	Log     *slog.Logger
	Now     func() time.Time
	// NAT, on a join, is what the join's path check found (NATOf), moments
	// old: the node's NAT until its own first check (runNATCheck), so that
	// its first overlay already offers relays only if it may need them.
	// Empty (unknown) on every other start.
	NAT NAT
	// Liveness is where a worker reads the others' liveness (liveness.go):
	// gossip (the zero value) or its node list.
	Liveness Liveness
	// testOnlyWrapCluster, when set (a test seam), wraps a worker's
	// fetched copies as its loops read them: the scale simulation
	// (scalesim_*_test.go) counts the reads.
	testOnlyWrapCluster func(clusterFacts) clusterFacts
}

// node is what every part of a member's runtime shares: who the node is
// (its facts, its live identity), how it reaches the others (the
// internal API's client, gossip, Nebula), where its cluster facts come
// from, and the loops' context and wake-ups.
type node struct {
	cfg     config.File
	version string
	facts   *statedir.Facts
	// live is the identity the node presents now; a renewed TLS leaf or
	// Nebula cert is swapped in (idMu serialises those changes) and the
	// TLS listeners and clients use it at their next handshake.
	idMu sync.Mutex
	live *pki.LiveIdentity
	// ctl is the control plane: raft, the internal API's server side,
	// admission and signing. Only control nodes have one; this is where a
	// node's role shows, decided once in Start.
	ctl      *control.Plane
	client   *control.Client // calls control nodes' internal API (every node)
	ports    config.Ports
	log      *slog.Logger
	now      func() time.Time
	stateDir string
	gossip   *gossip.Gossip
	mesh     *mesh.Mesh
	// cluster is where the node's cluster facts come from (facts.go):
	// its raft on a control node, fetched copies on a worker.
	cluster clusterFacts
	// copies are a worker's copies (nil on a control node once its raft
	// opened): its watch stream's counters show in status.
	copies *fetched.Copies
	// heard is a worker's liveness from its node list, when chosen
	// (liveness.go); nil: gossip's (peers).
	heard *recordLiveness
	// standing is whether the cluster still knows this node (standing.go).
	standing *fetched.Standing
	// fit is the node's fitness to serve: disk and clock (fitness.go).
	fit *fitCheck
	// nat is this node's NAT, as its path check saw it (natpath.go): it
	// decides whether the node offers relays (desired.Inputs.SelfNoNAT).
	nat natState
	// subnets are the routes and exit node in the kernel (subnets.go).
	subnets *subnets
	// factsOut posts this node's version and CA report (factreport.go).
	factsOut *factReporter
	// paths wakes the loops acting on this node's tunnels (pathwake.go).
	pathWake bell
	// overlay6Memo is ownOverlay6's, for the certificate held (certmemo.go).
	overlay6Memo pemMemo[netip.Prefix]

	// kick wakes the overlay loop (poke); followKick the follow loop,
	// with the notifications in followTold it is to answer (reconcile.go).
	kick       chan struct{}
	followKick chan struct{}
	followMu   sync.Mutex
	followTold told
	// ownSeen is this node's record as followReads last saw it (followMu).
	ownSeen struct {
		rec control.NodeRecord
		ok  bool
	}
	// loopCtx is the context of the runtime's goroutines (Spawn); Stop
	// cancels it with loops and waits for them (wg).
	wg      sync.WaitGroup
	loopCtx context.Context
	loops   context.CancelFunc
}

// Runtime is everything a member node runs: Nebula (overlay), gossip
// (membership, keyring), the CA bundle and certificates it follows
// (caFollow, renewal), the loops that keep them in line with the cluster,
// and for a control node raft and the control listener (enroll and
// internal API). It is started from the state dir and stopped in reverse
// order.
type Runtime struct {
	*node
	ov      *overlay
	members *membership
	keys    *keyring
	ca      *caFollow
	ids     *identities // the JWT issuers a control node trusts (identities.go); nil: none
	renew   *renewal
	met     *metrics.Set
	pairs   *pairHealth      // the members this node cannot reach (pairhealth.go)
	pairIdx pairIndex        // pair health's targets between changes (pairhealth_index.go)
	paths   *pathup.Upgrader // moves relayed tunnels onto direct paths (pathup.go)
	dns     *dnsNames        // the cluster's names; nil with dns.enabled false (names.go)
	silence *silence         // members this lighthouse stopped hearing from; nil on a worker (silence.go)

	control   *http.Server
	controlLn net.Listener
	stun      *netcheck.Responder // control nodes (netcheck.go)
	// steps are the follow loop's, decided at start (reconcile.go).
	steps []followStep
	// peersAsked is when a control node without a leader last asked its
	// peers whether they count it a member (standing.go).
	peersAsked time.Time
}

// overlay is the node's Nebula: the config it should run (its identity,
// the others from raft and gossip, the firewall and MTU in force), what
// it runs, and reloading the one into the other (overlay.go).
type overlay struct {
	*node
	meshBase    mesh.Config // from meshd.yaml and the facts; meshConfig adds identity and peers
	policyMu    sync.Mutex
	inForce     config.Policy // firewall and MTU in force (firewall.go), guarded by policyMu
	appliedMu   sync.Mutex
	meshApplied mesh.Config   // guarded by appliedMu
	lastReload  time.Time     // when reconcileOverlay last reloaded Nebula (the overlay loop's own)
	gap         time.Duration // the least time after lastReload before the next reload (nextGap)
	overlayErr  atomic.Value  // errBox: the last reload refusal, for status
	// tracker follows the inputs of the config applied, while tracking
	// (overlaydelta.go); both the overlay loop's own.
	tracker  desired.Tracker
	tracking bool
	// recVer is the node list's version the tracker's records are
	// (fetched.RecordDelta), when recFollow: the overlay loop then hands
	// it only the records changed since (overlaypass.go).
	recVer    uint64
	recFollow bool
	// converted counts the records the overlay loop converted for its
	// passes (overlaypass.go): TestChangeConvertsTheChange reads it.
	converted  atomic.Uint64
	parked     *Parked // userspace mode: where Stop parks the overlay it cannot stop
	ignoredMu  sync.Mutex
	ignored    map[string]ignoredSeen // gossip members not matched to a record (ignored.go)
	ignoredDue time.Time              // when the pending warning's poke fires
}

// membership is the node's gossip: joining and rejoining its peers, the
// gossip view, and the answers to the cluster's queries (membership.go,
// views.go, revocationack.go).
type membership struct {
	*node
	ov   *overlay
	keys *keyring
	// evidence is this node's direct probes of the members gossip says
	// are down: what the gossip view shows of that (evidence.go).
	evidence *evidence
	turn     rejoinTurn // which missing peers the next rejoin pass probes (rejoinpick.go)
}

// keyring is the gossip keyring this node runs and reports (keyring.go).
type keyring struct {
	*node
	mu      sync.Mutex
	id      string    // state.KeyringID of the keys applied
	rotated time.Time // when the cluster last finished a rotation, as last heard
	// report wakes runKeyReports: the keyring changed (buffered 1).
	report chan struct{}
}

// caFollow is the CA trust bundles this node follows, what it reports of
// them, and, on the CA holder, the end of a rotation (carotation.go).
type caFollow struct {
	*node
	ov      *overlay
	mu      sync.Mutex
	signing control.CABundle // the signing CAs, so a worker knows to fetch reissued certificates
	// wake wakes runTLSRenewal when the phase or the signing CA changed
	// (buffered 1): a reissued leaf is adopted at once, not at the loop's
	// next timer.
	wake chan struct{}
	// report wakes runCAReports (buffered 1).
	report chan struct{}
	// reported is control.CAReport of the identity running (certmemo.go).
	reported pemMemo[string]
}

// renewal adopts this node's renewed certificates, and on a control node
// renews the others' TLS leaves (tlsrenew.go, certs.go).
type renewal struct {
	*node
	ca *caFollow
	// renewOthers signs the TLS leaves that are due, on a control node
	// (the CA holder signs, the others forward); nil on a worker.
	renewOthers func(context.Context) time.Time
}

// Start starts a member node's components from its state dir (o.Boot: on
// init, bootstrapping raft). On an error everything started is stopped.
func Start(ctx context.Context, o Options) (_ *Runtime, err error) {
	facts, dir := o.Facts, o.Config.StateDir
	id, err := pki.LoadIdentity(filepath.Join(dir, statedir.IdentityDir))
	if err != nil {
		return nil, statedir.Corrupt(err)
	}
	live, err := pki.NewLiveIdentity(id)
	if err != nil {
		return nil, codes.Wrap(codes.StateDir, err)
	}
	loadHeld(dir, live, o.Log) // a CA rotation's leaf under the old CA (carotation.go)
	nd := &node{cfg: o.Config, version: o.Version, facts: facts, live: live, ports: o.Config.Ports, log: o.Log, now: o.Now,
		stateDir: dir, kick: make(chan struct{}, 1), followKick: make(chan struct{}, 1)}
	nd.fit = newFitCheck(nd)
	nd.factsOut = newFactReporter(o.Version, nd.signCA, nd.postFacts, o.Log) // factreport.go
	nd.standing = fetched.NewStanding(o.Now, o.Log)
	nd.standing.OnChange(nd.standingChanged)
	nd.nat.set(o.NAT)
	ov := &overlay{node: nd, meshBase: o.Config.MeshBase(facts.Role, facts.Underlay), inForce: o.Policy, parked: o.Parked}
	if nd.subnets, err = newSubnets(dir, ov.meshBase.TunDev, facts.Overlay, !ov.meshBase.Userspace); err != nil {
		return nil, err
	}
	keys := &keyring{node: nd, report: make(chan struct{}, 1)}
	ca := &caFollow{node: nd, ov: ov, wake: make(chan struct{}, 1), report: make(chan struct{}, 1)}
	rt := &Runtime{node: nd, ov: ov, keys: keys, ca: ca, members: &membership{node: nd, ov: ov, keys: keys},
		renew: &renewal{node: nd, ca: ca}, met: o.Metrics}
	rt.pairs = newPairHealth(o.Config.PairProbe(), rt.pairTargets, nd.reachAddr, o.Log, o.Now)
	rt.pairs.flipped = nd.pathWake.ring
	if facts.Role != pki.RoleControl {
		rt.pairs.active = rt.pairActive // pairactive.go
	}
	rt.members.evidence = newEvidence(nd.gossipListens, o.Config.PairProbe().Timeout, time.Now, o.Log) // time.Now: gossip.LastSeen's clock
	boot := o.Boot
	defer func() {
		if err != nil {
			rt.Stop()
		}
	}()
	if rt.client, err = control.NewLiveClient(live); err != nil {
		return nil, err
	}
	// Until its raft opens, a control node knows what a worker knows
	// before its first node list: the seeds and lighthouses its join
	// named. A worker reads the list it saved before a restart.
	copies := fetched.New(rt.client, facts.NodeID, facts.Seeds, facts.HomeSeed, rt.stateDir, rt.standing, rt.log)
	if facts.Role != pki.RoleControl {
		if err := copies.Load(); err != nil {
			return nil, err
		}
	}
	rt.cluster, rt.copies = copies, copies
	if o.testOnlyWrapCluster != nil {
		rt.cluster = o.testOnlyWrapCluster(copies)
	}
	// Start order (STYLE §4): mesh, gossip, raft, listeners, loops.
	if err := rt.ov.startMesh(); err != nil {
		return nil, err
	}
	if err := rt.members.startPool(ctx); err != nil { // outofpool.go
		return nil, err
	}
	if facts.Role == pki.RoleControl {
		if err := rt.startControlPlane(ctx, boot); err != nil {
			return nil, err
		}
		rt.cluster, rt.copies = planeFacts{p: rt.ctl, nodeID: facts.NodeID, seeds: facts.Seeds}, nil
		rt.renew.renewOthers = rt.ctl.RenewTLSCerts
		rt.steps = rt.followSteps(rt.controlDuties())
		if err := rt.startControl(); err != nil {
			return nil, err
		}
	}
	loopCtx, cancel := context.WithCancel(context.Background())
	rt.loopCtx, rt.loops = loopCtx, cancel
	rt.startLiveness(rt.livenessOf(o.Liveness))
	rt.startNames()    // names.go
	rt.startResolved() // resolved.go
	if rt.ctl != nil {
		if err := rt.startSTUN(); err != nil { // netcheck.go
			return nil, err
		}
	}
	if rt.steps == nil {
		rt.steps = rt.followSteps(nil) // a worker: fetches only
	}
	if rt.copies != nil { // a worker: its copies follow a watch stream (agent/fetched/watch.go)
		rt.Spawn(func(ctx context.Context) { rt.copies.Follow(ctx, rt.watched) })
	}
	rt.Spawn(func(ctx context.Context) { rt.runReconcile(ctx, rt.cfg.ReconcileInterval) })
	rt.Spawn(func(ctx context.Context) { rt.runFollow(ctx, rt.cfg.ReconcileInterval) })
	rt.Spawn(func(ctx context.Context) { rt.renew.runTLSRenewal(ctx, rt.cfg.ReconcileInterval) })
	rt.spawnPoolLoops() // outofpool.go: rejoin, queries, keyring reports
	rt.Spawn(rt.ca.runCAReports)
	rt.Spawn(rt.factsOut.run) // factreport.go: the facts reportCA offers, by the internal API
	rt.Spawn(rt.runPoolFacts) // poolfacts.go: out of the pool, the revocations blocked
	rt.Spawn(rt.runFitness)   // fitness.go
	rt.Spawn(rt.pairs.run)
	rt.paths = rt.newPathUp()
	rt.Spawn(rt.paths.Run)      // pathup.go
	rt.Spawn(rt.runNATCheck)    // natpath.go
	rt.Spawn(rt.runRelayDown)   // relaydown.go
	rt.Spawn(rt.runPathWake)    // pathwake.go: wakes the two above on a change
	rt.Spawn(rt.runRelayReport) // relay.go
	if rt.ctl == nil {
		rt.Spawn(rt.runTunnelReports) // tunnels.go
	} else {
		rt.Spawn(rt.ctl.WatchCarriers) // agent/control/carrier.go: the leader moves a prefix off a carrier that is down
	}
	if rt.ov.applied().AmLighthouse {
		every := mesh.LighthouseInterval(rt.ov.applied())
		rt.silence = newSilence(rt.mesh, every, rt.now)
		rt.Spawn(rt.silence.run)
		if rt.ctl != nil { // the leader's liveness verdict, and the others' answers to it (agent/control/verdict.go)
			rt.Spawn(func(ctx context.Context) { rt.ctl.RunVerdict(ctx, rt.silence, every) })
		}
	}
	rt.startOverlayMetrics(loopCtx)
	return rt, nil
}

// spawn runs f in the runtime's wait group with the loops' context: stop
// cancels it and waits for f to return. Every goroutine a runtime starts
// goes through here (or adds itself to wg for a listener it serves).
func (nd *node) Spawn(f func(ctx context.Context)) {
	nd.wg.Add(1)
	go func() {
		defer nd.wg.Done()
		f(nd.loopCtx)
	}()
}
