package control

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// Ephemeral nodes (issue 31): a worker admitted ephemeral (an enrolment
// key minted with --ephemeral, or `join --ephemeral`) is removed by the
// cluster once gossip has seen it failed or left for the ephemeral window
// (Config.EphemeralAfter, meshd.yaml's ephemeral_after), then forgotten.
//
// Every control node sweeps at a quarter of the window (at most every
// maxReapTick) and times the ephemeral workers on its own clock
// (ephemeraldown.go); only the raft leader acts. A node down for the
// window is removed through the path `meshctl remove` takes
// (RemoveAndConfirm: recorded removed, its certificates revoked, gossip
// told, the gossip key rotated, every live member asked to acknowledge
// the revocation and the round recorded), a node that left by `meshctl
// leave` is recorded removed and its round asked the same way; then it
// is forgotten (state.ForgetNode): its record, name and overlay IP go,
// its revocations stay until the certificates expire. A node that comes
// back alive within the window (a restart) is not removed: its time
// starts again when it next goes down.
//
// Gossip's word is not enough (issue 52 item 8): any member's machine
// holds the gossip key and can forge memberlist's dead messages and
// serf's leave intents about a live node. The view the sweep times shows
// such a node down only once this node's own direct probe of its overlay
// address failed (agent/member/evidence.go), and before an active node is
// removed the leader probes it once more (confirmDown): one that answers
// is kept and timed afresh.

// DefaultEphemeralAfter is how long gossip must have seen an ephemeral
// node failed or left before the cluster removes it.
const DefaultEphemeralAfter = 60 * time.Second

// The bounds meshd.yaml's ephemeral_after takes: long enough that a
// node's restart (and memberlist's failure detection of a live node
// wrongly suspected) does not cost it its membership, and short enough
// to be a window.
const (
	MinEphemeralAfter = 10 * time.Second
	MaxEphemeralAfter = 24 * time.Hour
)

// maxReapTick bounds the interval of the sweep: a quarter of the window,
// at most this (1 minute's default window: every 5 s; the smallest, 10 s:
// every 2.5 s). A node is removed within the window and one sweep of
// gossip seeing it down.
const maxReapTick = 5 * time.Second

// reapsPerSweep bounds the removals and forgets one sweep writes (each
// removal is several raft entries: the removal, a gossip key rotation's
// three steps, the acknowledgement round, the forget), so that a
// thousand CI runners killed at once are removed over a few minutes
// instead of flooding raft in one sweep; the longest down go first.
const reapsPerSweep = 16

// forgetGrace is how long a removed ephemeral node that this sweep did
// not remove itself (an operator's `meshctl remove`, or a removal whose
// leader lost leadership before it forgot the node) waits for its
// acknowledgement round to be recorded before it is forgotten anyway:
// the longest a removal takes to record it (three key rotation steps,
// the longest acknowledgement bound, a write).
const forgetGrace = 3*DefaultKeyStepTimeout + MaxRevocationAckTimeout + writeTimeout

func (c Config) ephemeralAfter() time.Duration {
	if c.EphemeralAfter <= 0 {
		return DefaultEphemeralAfter
	}
	return c.EphemeralAfter
}

// ReapTick is how often the ephemeral sweep runs for window: a quarter of
// it, at most maxReapTick.
func ReapTick(window time.Duration) time.Duration { return min(window/4, maxReapTick) }

// ephemeralReaper is the plane's part of the sweep.
type ephemeralReaper struct {
	down   ephemeralDown
	sweep  sync.Mutex    // one sweep at a time
	reaped atomic.Uint64 // nodes this node removed since the plane started
	sweeps atomic.Uint64 // sweeps run, which tests wait on
	cutOff atomic.Bool   // the last sweep found this leader's gossip cut off (gossipCutOff)
}

// gossipCutOff reports whether this node's gossip view shows none of the
// other active control nodes alive or suspect while there are some: then
// it is this node's gossip that is cut off (its overlay down, or a
// partition of its own), and every worker only looks down to it. With
// one control node there is nothing to compare with: it decides alone.
func gossipCutOff(nodes []state.Node, view map[string]string, self string) bool {
	others := 0
	for _, n := range nodes {
		if n.Role != pki.RoleControl || n.State != state.NodeActive || n.ID == self {
			continue
		}
		others++
		if st := view[n.Name]; st == "alive" || st == "suspect" {
			return false
		}
	}
	return others > 0
}

// EphemeralReaped is how many ephemeral nodes this node removed since the
// plane started (meshd_ephemeral_reaped_total).
func (p *Plane) EphemeralReaped() uint64 { return p.reaper.reaped.Load() }

// ReapEphemeral is one sweep as of now (this node's clock): it times
// every ephemeral worker (ephemeralDown) and, on the raft leader only,
// removes each one down for window or longer and forgets it, and forgets
// each removed ephemeral node whose removal is settled (its
// acknowledgement round recorded, or removed for forgetGrace); at most
// reapsPerSweep of them, the longest down first. The CA holder and this
// node are never removed; a control node is never ephemeral here
// (state.EphemeralAllowed). A failure is logged and tried again at the
// next sweep; it does not stop the others. It returns how many nodes it
// removed.
func (p *Plane) ReapEphemeral(ctx context.Context, now time.Time, window time.Duration) int {
	r := &p.reaper
	r.sweep.Lock()
	defer r.sweep.Unlock()
	defer r.sweeps.Add(1)
	nodes := p.raft.FSM().Nodes()
	if !slices.ContainsFunc(nodes, ephemeralWorker) {
		r.down.observe(nil, nil, p.hooks.LastSeen, p.cfg.Name, now) // nothing to time: no gossip view computed
		return 0
	}
	view := p.gossipViewOf(nodes) // outofpool.go: a worker out of the pool by its record
	r.down.observe(nodes, view, p.lastSeenIn(nodes), p.cfg.Name, now)
	if !p.raft.LeaderReady() { // its FSM holds every entry before its term (raftnode/ready.go)
		return 0
	}
	// A leader whose own gossip is cut off (its overlay down, say) sees
	// every worker down: it removes no one until it sees another control
	// node alive again, and says so once.
	cutOff := gossipCutOff(nodes, view, p.cfg.NodeID)
	if cutOff != r.cutOff.Swap(cutOff) && cutOff {
		p.log.Warn("this leader's gossip sees no other control node alive: no ephemeral node is removed until it does")
	}
	cl, _ := p.raft.FSM().Cluster()
	var todo []reapDue
	for _, n := range nodes {
		if !ephemeralWorker(n) || n.ID == p.cfg.NodeID || n.ID == cl.CAHolder {
			continue
		}
		switch n.State {
		case state.NodeActive, state.NodeLeft:
			if d, ok := r.down.down(n.ID, now); ok && d >= window && !cutOff {
				todo = append(todo, reapDue{n, d})
			}
		case state.NodeRemoved:
			d := r.down.removedFor(n.ID, now)
			if _, acked := p.raft.FSM().RevocationAck(n.ID); acked || d >= forgetGrace {
				todo = append(todo, reapDue{n, d})
			}
		}
	}
	slices.SortStableFunc(todo, func(a, b reapDue) int { return cmp.Compare(b.down, a.down) })
	todo = p.confirmDown(ctx, todo[:min(len(todo), reapsPerSweep)], now, window)
	reaped := 0
	for i, d := range todo {
		if i == reapsPerSweep || ctx.Err() != nil || !p.raft.IsLeader() {
			break
		}
		if d.n.State == state.NodeRemoved {
			p.forgetEphemeral(ctx, d.n)
			continue
		}
		if p.reap(ctx, d.n, d.down, window) {
			reaped++
		}
	}
	return reaped
}

// reapDue is a record a sweep acts on: an ephemeral node down past its
// window (active, or recorded left), or a removed one to forget.
type reapDue struct {
	n    state.Node
	down time.Duration // for a removed node, how long it has been removed here
}

// confirmDown keeps, of todo, the records to forget, the nodes recorded
// left (the node said so itself, over mTLS), and the active nodes that do
// not answer this node's direct probe of their record's overlay address
// now (Hooks.Reach, all at once, each within reachBound: reachCache, as a
// key rotation probes). Gossip alone never removes a node (issue 52 item
// 8): anyone holding the gossip key can say any node failed or left. A
// node that answers is up, whatever gossip says: its down time starts
// again.
func (p *Plane) confirmDown(ctx context.Context, todo []reapDue, now time.Time, window time.Duration) []reapDue {
	reach := newReachCache(ctx, p.hooks.Reach, p.log)
	for _, d := range todo {
		if d.n.State == state.NodeActive {
			reach.get(d.n.OverlayIP)
		}
	}
	reach.wait()
	return slices.DeleteFunc(todo, func(d reapDue) bool {
		if d.n.State != state.NodeActive || reach.get(d.n.OverlayIP) != reachUp {
			return false
		}
		p.reaper.down.up(d.n.ID, now)
		p.log.Warn("gossip shows an ephemeral node down past its window, but it answers a direct probe over the overlay: not removed, its time starts again",
			"code", codes.GossipContradicted, "node", d.n.Name, "node_id", d.n.ID, "down", d.down, "window", window)
		return true
	})
}

// reap removes n, an ephemeral worker down for down (past window), and
// forgets it once its removal is recorded. It reports whether the
// removal was recorded.
func (p *Plane) reap(ctx context.Context, n state.Node, down, window time.Duration) bool {
	actor := p.self()
	var (
		resp *apitype.RemoveResponse
		err  error
	)
	if n.State == state.NodeLeft {
		resp, err = p.removeLeft(ctx, n, actor)
	} else {
		resp, err = p.removeAndConfirm(ctx, n.Name, n.ID, actor, 0)
	}
	if err != nil {
		// NodeUnknown: the record changed under the sweep (removed by an
		// operator, its name passed on); the next sweep sees it as it is.
		if cur, ok := p.raft.FSM().Node(n.ID); !ok || cur.State != state.NodeRemoved || codes.Of(err) == codes.NodeUnknown {
			p.log.Warn("could not remove an ephemeral node down past its window; trying again at the next sweep",
				"code", codes.OrInternal(err), "node", n.Name, "node_id", n.ID, "down", down, "window", window, "err", err)
			return false
		}
		// Recorded removed, then something after it failed (the gossip
		// key rotation): the removal stands, and the node is forgotten.
		p.log.Warn("ephemeral node removed, but not all that follows a removal was done", "code", codes.OrInternal(err),
			"node", n.Name, "node_id", n.ID, "err", err)
	}
	var pending []string
	if resp != nil {
		pending = resp.Pending
	}
	p.log.Info("ephemeral node down past its window: removed, its certificates revoked", "code", codes.EventNodeReaped,
		"node", n.Name, "node_id", n.ID, "was", n.State, "down", down, "window", window, "pending", pending)
	// Counted before the forget, so a reader that sees the node forgotten
	// also sees it counted (meshd_ephemeral_reaped_total).
	p.reaper.reaped.Add(1)
	p.forgetEphemeral(ctx, n)
	return true
}

// removeLeft records removed n, an ephemeral worker that left (`meshctl
// leave`: its record left, its certificates not revoked, its name free
// but its overlay IP held), and asks the members to acknowledge the
// revocation as a removal does. The key rotation its leave owes is paid
// in the background (keysowed.go). The record is read again after a
// read index, so a record reused since (admitted again: joining) is not
// removed.
func (p *Plane) removeLeft(ctx context.Context, n state.Node, actor string) (*apitype.RemoveResponse, error) {
	if err := p.SyncRead(ctx); err != nil {
		return nil, err
	}
	cur, ok := p.raft.FSM().Node(n.ID)
	if !ok || cur.State != state.NodeLeft || !ephemeralWorker(cur) {
		return nil, codes.Wrap(codes.NodeUnknown, fmt.Errorf("%s is no longer an ephemeral node that left", n.Name))
	}
	if err := p.Write(ctx, &state.SetNodeState{NodeID: cur.ID, State: state.NodeRemoved, At: p.now(), Actor: actor}); err != nil {
		return nil, err
	}
	p.hooks.Poke()
	if err := p.hooks.NotifyRevoked(); err != nil {
		p.log.Warn("could not tell the cluster about the revocation; workers pick it up on their next tick", "err", err)
	}
	p.log.Info("node removed and its certificates revoked", "code", codes.EventNodeRemoved, "node", cur.Name, "actor", actor)
	return p.confirmRevocation(ctx, cur, p.cfg.revocationAckTimeout(), actor), nil
}

// forgetEphemeral deletes the record of n, a removed ephemeral node
// (state.ForgetNode), and tells the members their node lists changed.
func (p *Plane) forgetEphemeral(ctx context.Context, n state.Node) {
	if err := p.Write(ctx, &state.ForgetNode{NodeID: n.ID, At: p.now(), Actor: p.self()}); err != nil {
		p.log.Warn("could not forget a removed ephemeral node; trying again at the next sweep", "code", codes.OrInternal(err),
			"node", n.Name, "node_id", n.ID, "err", err)
		return
	}
	p.hooks.Poke()
	if err := p.hooks.NotifyRevoked(); err != nil {
		p.log.Debug("could not tell the workers their node list changed; they see it on their next tick", "err", err)
	}
	p.log.Info("removed ephemeral node forgotten: its name and overlay IP are free", "code", codes.EventNodeForgotten,
		"node", n.Name, "node_id", n.ID, "overlay_ip", n.OverlayIP)
}

// watchEphemeral runs the sweep until stop, every ReapTick(window), on
// every control node (each times the ephemeral nodes it sees; the leader
// acts). A sweep under way when stop closes is cancelled. It takes window
// and the clock once, from New.
func (p *Plane) watchEphemeral(stop <-chan struct{}, window time.Duration, now func() time.Time) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	defer func() {
		cancel()
		wg.Wait()
	}()
	t := time.NewTicker(ReapTick(window))
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		p.ReapEphemeral(ctx, now(), window)
	}
}
