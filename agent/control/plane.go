package control

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/raftnode"
	"github.com/meshd/meshd/agent/watch"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// Config is the control plane's data.
type Config struct {
	NodeID, Name string
	// PromoteTimeout bounds how long the leader waits for a joining
	// control node to catch up before it removes it again.
	PromoteTimeout time.Duration
	// NebulaLifetime is the lifetime of the Nebula host certs this node
	// signs (CA holder only).
	NebulaLifetime time.Duration
	// TLSLifetime is the lifetime of the TLS leaves this node signs (CA
	// holder only), at admission and renewal; zero means
	// pki.DefaultLeafLifetime.
	TLSLifetime time.Duration
	// RevocationAckTimeout bounds how long a removal waits for the
	// members to acknowledge the revocation; zero means
	// DefaultRevocationAckTimeout.
	RevocationAckTimeout time.Duration
	// TokenRetention is how long the leader keeps used, expired and
	// revoked token records before it prunes them; zero means
	// DefaultTokenRetention.
	TokenRetention time.Duration
	// KeyStepTimeout bounds each step of a gossip key rotation; zero means
	// DefaultKeyStepTimeout.
	KeyStepTimeout time.Duration
	// JoinBound is how long a node may stay joining before the leader
	// records its join failed; zero means DefaultJoinBound.
	JoinBound time.Duration
	// EphemeralAfter is how long gossip must have seen an ephemeral node
	// failed or left before the leader removes and forgets it
	// (ephemeral.go); zero means DefaultEphemeralAfter.
	EphemeralAfter time.Duration
	// WatchTombstones is how many deletions the watch table remembers
	// (zero: watch.DefaultTombstones); a worker further behind gets the
	// whole table (watch.go).
	WatchTombstones int
	// CADir is where this node keeps the CA keys when it holds them (or
	// receives them in a custody move): <state>/ca.
	CADir string
	// BackupWorkFactor is the scrypt work factor a CA backup is sealed
	// with; zero means pki.DefaultScryptWorkFactor. Only tests lower it.
	BackupWorkFactor int
}

// Hooks are what the control plane tells the rest of the node; each may
// be nil.
type Hooks struct {
	// Poke asks for an overlay reconcile now: a record changed.
	Poke func()
	// NotifyRevoked tells every member that the revocation list or the
	// node list changed: workers fetch both at once instead of at their
	// next tick (a removal, a confirmed join, a relay offer).
	NotifyRevoked func() error
	// ForceLeave drops a removed node from gossip.
	ForceLeave func(name string) error
	// Gossip is each gossip member's status by node name, for node lists.
	Gossip func() map[string]string
	// Pooled is the names gossip's member list holds, before any check of
	// a member against its record: a worker absent from it is out of the
	// pool and judged by its record (outofpool.go); one present but left
	// out of Gossip (a name gossiped from another node's address) is not.
	// nil: every worker Gossip lacks is judged by its record.
	Pooled func() map[string]bool
	// Versions is the meshd version each gossip member advertises (its
	// "ver" tag) by node name: what it runs now, which the version its
	// record holds (the one that joined) is not after an upgrade.
	Versions func() map[string]string
	// LastSeen is when a gossip member that is not alive was last seen.
	LastSeen func(name string) (time.Time, bool)
	// NotifyKeys tells every member that the gossip keyring changed.
	NotifyKeys func() error
	// NotifyCA tells every member that the CA trust bundles changed.
	NotifyCA func() error
	// KeyReports is every gossip member's report of its keyring.
	KeyReports func() []KeyReport
	// AskMembers asks every gossip member a query and collects the
	// answers by member name until bound passes or done is satisfied
	// (gossip.Gossip.Ask).
	AskMembers func(ctx context.Context, name string, payload []byte, bound time.Duration,
		done func(map[string][]byte) bool) (map[string][]byte, error)
	// Reach probes a node's overlay address directly (a TCP connection
	// to its gossip port, through Nebula, which authenticates the answer
	// with that node's certificate): nil when it answers or refuses.
	Reach func(ctx context.Context, addr netip.Addr) error
	// Tunnels is this node's established Nebula tunnels (tunnels.go).
	Tunnels func() []apitype.Tunnel
	// Clock is this node's clock against the other control nodes'
	// (clock.go): how far it runs ahead of their median, and
	// codes.ClockUntrusted once that is past max_clock_skew.
	Clock func() (deviation time.Duration, untrusted error)
	// DiskFailing is the state dir's last write check failure
	// (fitness.Disk), nil while it passes.
	DiskFailing func() error
	// Unreachable are the members this node cannot reach over the
	// overlay by its own probes (pair health; nil: none or unknown).
	Unreachable func() []string
}

// Deps are the control plane's collaborators.
type Deps struct {
	Log   *slog.Logger
	Now   func() time.Time
	Hooks Hooks
}

// Plane is a control node's control plane. Workers have none.
type Plane struct {
	cfg      Config
	raft     *raftnode.Node
	ca       atomic.Pointer[pki.CA] // this node's CA keys, if it has them; signing follows the record (heldCA)
	client   *Client
	log      *slog.Logger
	now      func() time.Time
	hooks    Hooks
	conns    *connSet      // port 7300's open connections
	stop     chan struct{} // closed by Close: ends watchNodes, watchJoins and watchEphemeral
	closed   sync.Once
	wg       sync.WaitGroup // goroutines the plane started (force-leave, read index rounds)
	reads    readBatch      // a follower's read index round trips, shared (readbatch.go)
	joinAges joinAges       // how long each join has been pending, on this node's clock (joinage.go)

	rotating sync.Mutex     // one gossip key rotation at a time on this node
	keyDebt  keyDebt        // the background rotation owed for departed nodes (keysowed.go)
	custody  sync.Mutex     // one custody change (handoff, receive, restore, release) at a time
	cas      caSet          // CA rotation: every CA key pair this node holds (carotation.go)
	watch    sync.WaitGroup // watchNodes, watchJoins, watchEphemeral
	tunnels  tunnelStore    // the workers' tunnel reports (tunnels.go)
	facts    factBatch      // the members' facts waiting for their raft write (facts.go)
	table    *watch.Table   // what workers copy, by the index that changed it (watch.go)
	records  recordCache    // the table's encoded records, kept between rebuilds (watch.go)
	leaders  *leaderWatch   // ends the streams of a node without a raft leader (watch.go)
	streams  streamsEnd     // ends every stream at once when the node stops (watch.go)
	reports  *gate          // tunnel reports a second (gates.go)
	lists    *gate          // node lists a second (gates.go)
	strict   *gate          // strict changes a second (gates.go)

	reaper ephemeralReaper // the ephemeral nodes' sweep (ephemeral.go)
	// lighthouse is this node's record of the members' host updates, set
	// by RunVerdict (heard.go, verdict.go); nil until then.
	lighthouse atomic.Pointer[Lighthouse]

	tlsScan, nebulaScan renewScan  // the CA holder's renewal passes skip an unchanged scan (renewscan.go)
	recordList          recordList // Records, kept until a node changes (recordlist.go)
}

// New is the control plane over an open raft node. ca is the CA keys this
// node has (nil if none); it signs with them only while raft's cluster
// record names it the CA holder, and forwards signing to the holder on
// record otherwise. client calls other control nodes.
func New(cfg Config, raft *raftnode.Node, ca *pki.CA, client *Client, d Deps) *Plane {
	if d.Log == nil {
		d.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if cfg.TokenRetention <= 0 {
		cfg.TokenRetention = DefaultTokenRetention
	}
	h := &d.Hooks
	if h.Poke == nil {
		h.Poke = func() {}
	}
	if h.NotifyRevoked == nil {
		h.NotifyRevoked = func() error { return nil }
	}
	if h.ForceLeave == nil {
		h.ForceLeave = func(string) error { return nil }
	}
	if h.Gossip == nil {
		h.Gossip = func() map[string]string { return nil }
	}
	if h.Versions == nil {
		h.Versions = func() map[string]string { return nil }
	}
	if h.LastSeen == nil {
		h.LastSeen = func(string) (time.Time, bool) { return time.Time{}, false }
	}
	if h.NotifyKeys == nil {
		h.NotifyKeys = func() error { return nil }
	}
	if h.NotifyCA == nil {
		h.NotifyCA = func() error { return nil }
	}
	if h.Reach == nil {
		h.Reach = func(context.Context, netip.Addr) error { return errNoGossip }
	}
	if h.KeyReports == nil {
		h.KeyReports = func() []KeyReport { return nil }
	}
	if h.Tunnels == nil {
		h.Tunnels = func() []apitype.Tunnel { return nil }
	}
	if h.Clock == nil {
		h.Clock = func() (time.Duration, error) { return 0, nil }
	}
	if h.DiskFailing == nil {
		h.DiskFailing = func() error { return nil }
	}
	if h.AskMembers == nil {
		h.AskMembers = func(context.Context, string, []byte, time.Duration, func(map[string][]byte) bool) (map[string][]byte, error) {
			return nil, errNoGossip
		}
	}
	p := &Plane{cfg: cfg, raft: raft, client: client, log: d.Log, now: d.Now, hooks: d.Hooks,
		conns: newConnSet(), stop: make(chan struct{}), table: watch.NewTable(cfg.WatchTombstones), leaders: newLeaderWatch(watchLeaderless, time.Second),
		streams: newStreamsEnd(),
		reports: newGate("tunnel reports", reportLimits(), nil, d.Log), lists: newGate("node lists", listLimits(), nil, d.Log),
		strict: newGate("strict changes", strictLimits(), nil, d.Log)}
	p.setCA(ca)
	if raft == nil {
		return p
	}
	// From here the raft port admits only members (connections accepted
	// since raft opened are judged now too).
	raft.SetPeerCheck(p.raftPeer)
	p.watch.Add(5)
	go func() {
		defer p.watch.Done()
		p.watchNodes(p.stop)
	}()
	go func() {
		defer p.watch.Done()
		p.watchTable(p.stop)
	}()
	go func() {
		defer p.watch.Done()
		p.leaders.run(p.stop, p.raft.LeaderID)
	}()
	bound, window, now := cfg.joinBound(), cfg.ephemeralAfter(), d.Now
	go func() {
		defer p.watch.Done()
		p.watchJoins(p.stop, bound, now)
	}()
	go func() {
		defer p.watch.Done()
		p.watchEphemeral(p.stop, window, now)
	}()
	return p
}

// TrackConn is port 7300's http.Server ConnState hook: the plane closes
// the open connections of peers that stop being members.
func (p *Plane) TrackConn(c net.Conn, st http.ConnState) { p.conns.track(c, st) }

func (c Config) revocationAckTimeout() time.Duration {
	if c.RevocationAckTimeout <= 0 {
		return DefaultRevocationAckTimeout
	}
	return c.RevocationAckTimeout
}

func (c Config) tlsLifetime() time.Duration {
	if c.TLSLifetime <= 0 {
		return pki.DefaultLeafLifetime
	}
	return c.TLSLifetime
}

// Raft is the raft node under the plane.
func (p *Plane) Raft() *raftnode.Node { return p.raft }

// HoldsCA reports whether this node holds the CA: raft's record names it
// and its keys are loaded.
func (p *Plane) HoldsCA() bool { return p.heldCA() != nil }

// Signer is what the enroll server signs with: the CA while this node
// holds it on record, a forwarder to the holder on record otherwise,
// decided at each call (custody can move); either way the CA holder signs
// only what raft admitted.
func (p *Plane) Signer() enroll.Signer { return followSigner{p: p} }

// Ledger is the enroll ledger over raft.
func (p *Plane) Ledger() *Ledger { return &Ledger{p: p} }

// Close waits for the plane's goroutines, hands raft leadership off when
// another voter can take it, and shuts raft down.
func (p *Plane) Close() error {
	p.closed.Do(func() { close(p.stop) })
	p.watch.Wait()
	p.wg.Wait()
	if err := p.raft.HandOff(); err != nil {
		p.log.Warn("leadership transfer before stopping failed", "err", err)
	}
	return p.raft.Close()
}

// newRequestID is a random id for a tracked write.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
