package gossip

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"

	"github.com/meshd/meshd/codes"
)

// serfEventBuffer is the capacity of the channel serf writes to. serf
// blocks on it (and its snapshotter drops when it is full), so the pump
// drains it continuously into the drop-oldest Events queue.
const serfEventBuffer = 1024

// errShutdown is returned by calls made after Shutdown.
var errShutdown = errors.New("gossip is shut down")

// Gossip is a running serf member. Its methods are safe for concurrent use.
type Gossip struct {
	name    string
	log     *slog.Logger
	sink    *logSink
	serf    *serf.Serf
	serfCh  chan serf.Event
	events  *eventQueue
	ring    *memberlist.Keyring // memberlist's own keyring: SetKeys changes it in place
	tr      *transport          // memberlist's transport (StreamsRefused)
	queries chan Query          // see Queries (query.go)
	seen    lastSeen            // when failed or left members were last seen
	// copies counts Members and Statuses calls, each a copy of every
	// member (Copies).
	copies atomic.Uint64

	stop chan struct{} // closed by Shutdown; the pump drains and exits
	wg   sync.WaitGroup

	// tagsMu makes each tag change a read-modify-write of its own:
	// without it two callers changing different tags at once could each
	// gossip the other's old value (UpdateTags).
	tagsMu sync.Mutex
	mu     sync.Mutex // guards closed, wg.Go and leaves.Add, so none races a Wait
	closed bool
	leaves sync.WaitGroup // Leave calls in progress; Shutdown lets them finish first

	shutdownOnce sync.Once
	shutdownErr  error
}

// New validates cfg, binds BindAddr:BindPort (tcp and udp) and starts serf.
// It joins nobody unless cfg.SnapshotPath names a snapshot with known
// members, in which case serf rejoins them in the background (the file is
// created, 0600, if missing). Errors carry codes: see Validate; an address
// not on this machine gives codes.AdvertiseAddr, a port in use
// codes.ConfigInvalid, an unusable snapshot codes.StateDir.
func New(cfg Config) (*Gossip, error) { return create(cfg, nil) }

// create is New; tune, if not nil, may change serf's configuration before
// serf starts (the scale simulation dilates the timers with it).
func create(cfg Config, tune func(*serf.Config)) (*Gossip, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "gossip")

	if err := checkSnapshot(cfg.SnapshotPath, log); err != nil {
		return nil, err
	}
	if err := probeSnapshot(cfg.SnapshotPath); err != nil {
		return nil, err
	}

	g := &Gossip{
		name:    cfg.Name,
		log:     log,
		sink:    newLogSink(log, cfg.suspectFor()),
		serfCh:  make(chan serf.Event, serfEventBuffer),
		events:  newEventQueue(eventBuffer),
		queries: make(chan Query, queryBuffer),
		stop:    make(chan struct{}),
	}
	sc, err := cfg.serfConfig(g.serfCh, g.sink.logger())
	if err != nil {
		return nil, err
	}
	if tune != nil {
		tune(sc)
	}
	// Bind before serf starts goroutines (serf.Create does not stop them
	// when memberlist then fails), so an unusable address fails here with
	// its code.
	tr, err := listenTransport(cfg.Network, cfg.Overlay, cfg.BindAddr, cfg.BindPort, sc.MemberlistConfig.Logger)
	if err != nil {
		return nil, err
	}
	sc.MemberlistConfig.Transport = tr
	g.ring, g.tr = sc.MemberlistConfig.Keyring, tr
	g.wg.Go(g.pump)
	s, err := serf.Create(sc)
	if err != nil {
		_ = tr.Shutdown()
		close(g.stop)
		g.wg.Wait()
		return nil, createError(cfg, err)
	}
	g.serf = s
	advAddr, advPort := cfg.advertise()
	log.Info("gossip started", "name", cfg.Name,
		"bind", net.JoinHostPort(cfg.BindAddr, fmt.Sprint(cfg.BindPort)),
		"advertise", net.JoinHostPort(advAddr, fmt.Sprint(advPort)),
		"keys", len(cfg.Keys), "fast", cfg.Fast, "snapshot", cfg.SnapshotPath != "")
	return g, nil
}

// Events returns the member events, in the order serf raised them. The
// channel holds 256 events; when the consumer falls behind, the oldest is
// dropped (see Dropped), so serf is never blocked. It starts with this
// node's own join. It is closed when Shutdown has stopped serf.
func (g *Gossip) Events() <-chan Event { return g.events.ch }

// Dropped returns how many events were discarded because Events was full.
func (g *Gossip) Dropped() uint64 { return g.events.dropped.Load() }

// KeyErrors returns how many received messages no installed key could
// decrypt (including plaintext ones), as memberlist reported them. A count
// that keeps rising means a peer uses another gossip key: codes.GossipKey.
func (g *Gossip) KeyErrors() uint64 { return g.sink.keyErrors.Load() }

// Members returns every member serf knows, this node included, sorted by
// name. Failed and left members stay listed until reaped. A suspected
// member is listed alive: memberlist does not say whom it suspects
// (suspect.go); Suspects has this node's own suspicions.
func (g *Gossip) Members() []Member {
	g.copies.Add(1)
	return membersFromSerf(g.serf.Members(), nil)
}

// Statuses is each member's status by the address it gossips from, a
// member this node's own probes suspect (Suspects) as StatusSuspect: what
// a loop that runs four times a second needs of Members, without copying
// every member's tags.
func (g *Gossip) Statuses() map[netip.Addr]Status {
	g.copies.Add(1)
	suspects := g.Suspects()
	ms := g.serf.Members()
	out := make(map[netip.Addr]Status, len(ms))
	for _, m := range ms {
		addr, _ := netip.AddrFromSlice(m.Addr)
		out[addr.Unmap()] = statusOf(m.Status, suspects[m.Name])
	}
	return out
}

// Copies counts the calls of Members and Statuses since start, each a
// copy of every member: what a loop that read the members on a timer
// would drive up (issue 54; member.TestIdleLoopsDoNotScan counts it).
func (g *Gossip) Copies() uint64 { return g.copies.Load() }

// Suspects are the members this node's own probes suspect now (their
// last failed probe within a few probe rounds), by name. A hint for
// moving traffic off a member early (agent/member/relaydown.go), never a
// verdict: gossip's own failure decides membership.
func (g *Gossip) Suspects() map[string]bool { return g.sink.suspects.active() }

// LocalMember returns this node as gossip advertises it.
func (g *Gossip) LocalMember() Member {
	return memberFromSerf(g.serf.LocalMember(), false)
}

// SetTags replaces this node's tags and gossips them; the others see an
// EventUpdate. It waits until the update is broadcast (at most serf's
// BroadcastTimeout, 5s). The encoded tags must fit in 512 bytes.
func (g *Gossip) SetTags(tags map[string]string) error {
	g.tagsMu.Lock()
	defer g.tagsMu.Unlock()
	return g.setTags(cloneTags(tags))
}

// UpdateTags sets the tags in set on this node's tags, keeping every
// other, and gossips the result as SetTags does; nothing is sent when
// every value is already set. Callers that each own some tags (the
// keyring, CA and NAT reports) use it so that none undoes another's
// change made at the same moment (TestUpdateTagsConcurrent).
func (g *Gossip) UpdateTags(set map[string]string) error {
	g.tagsMu.Lock()
	defer g.tagsMu.Unlock()
	tags := cloneTags(g.serf.LocalMember().Tags)
	changed := false
	for k, v := range set {
		if old, ok := tags[k]; !ok || old != v {
			tags[k], changed = v, true
		}
	}
	if !changed {
		return nil
	}
	return g.setTags(tags)
}

func (g *Gossip) setTags(tags map[string]string) error {
	if g.isClosed() {
		return fmt.Errorf("gossip set tags: %w", errShutdown)
	}
	if err := g.serf.SetTags(tags); err != nil {
		return fmt.Errorf("gossip set tags: %w", err)
	}
	return nil
}

// Shutdown stops serf without leaving: peers see this node fail, and it
// rejoins when it starts again. A restart is not a departure; call Leave
// first to depart. Shutdown is idempotent, closes Events, and returns only
// when every goroutine this package started has exited. A Leave still in
// progress (its context ended early) is allowed to finish first, since
// stopping gossip under it would only make it wait out serf's timeouts; a
// Join still in progress ends within memberlist's TCP timeout.
func (g *Gossip) Shutdown() error {
	g.shutdownOnce.Do(func() {
		g.mu.Lock()
		g.closed = true
		g.mu.Unlock()
		g.leaves.Wait()
		if err := g.serf.Shutdown(); err != nil {
			g.shutdownErr = fmt.Errorf("gossip shutdown: %w", err)
		}
		close(g.stop)
		g.wg.Wait()
		g.log.Info("gossip stopped", "name", g.name,
			"dropped_events", g.Dropped(), "key_errors", g.KeyErrors())
	})
	return g.shutdownErr
}

// pump moves serf's events to the Events queue until Shutdown, then drains
// what serf already queued and closes Events.
func (g *Gossip) pump() {
	defer close(g.events.ch)
	defer close(g.queries)
	for {
		select {
		case e := <-g.serfCh:
			g.forward(e)
		case <-g.stop:
			for {
				select {
				case e := <-g.serfCh:
					g.forward(e)
				default:
					return
				}
			}
		}
	}
}

// forward translates one serf event and queues it.
func (g *Gossip) forward(e serf.Event) {
	if q, ok := e.(*serf.Query); ok {
		g.queryIn(q)
		return
	}
	ev, ok := eventFromSerf(e, time.Now())
	if !ok {
		g.log.Debug("ignoring serf event", "event", e.String())
		return
	}
	g.seen.note(ev)
	g.events.push(ev)
	g.sink.changes.ring()
}

// spawn runs f on a goroutine that Shutdown waits for. It reports false,
// running nothing, once Shutdown has begun.
func (g *Gossip) spawn(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Go(f)
	return true
}

// spawnLeave is spawn for a Leave, which Shutdown lets finish before it
// stops serf.
func (g *Gossip) spawnLeave(f func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.leaves.Add(1)
	g.wg.Go(func() {
		defer g.leaves.Done()
		f()
	})
	return true
}

func (g *Gossip) isClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

func bindError(hp string, err error) error {
	switch {
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return codes.Wrap(codes.AdvertiseAddr, fmt.Errorf("gossip: bind %s: the address is not on this machine: %w", hp, err))
	case errors.Is(err, syscall.EADDRINUSE):
		return codes.Wrap(codes.ConfigInvalid, fmt.Errorf("gossip: bind %s: the port is in use (is another meshd running?): %w", hp, err))
	default:
		return codes.Wrap(codes.Internal, fmt.Errorf("gossip: bind %s: %w", hp, err))
	}
}

// createError gives a serf.Create failure its code. serf formats the
// underlying errors with %v, so only the text is left to go by.
func createError(cfg Config, err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "snapshot"):
		return codes.Wrap(codes.StateDir, fmt.Errorf("gossip: snapshot %s: %w", cfg.SnapshotPath, err))
	case strings.Contains(msg, "tags"):
		return codes.Wrap(codes.ConfigInvalid, fmt.Errorf("gossip: tags: %w", err))
	case strings.Contains(msg, "address already in use"):
		return codes.Wrap(codes.ConfigInvalid, fmt.Errorf("gossip: bind %s:%d: %w", cfg.BindAddr, cfg.BindPort, err))
	default:
		return codes.Wrap(codes.Internal, fmt.Errorf("gossip: start serf: %w", err))
	}
}
