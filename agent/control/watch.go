package control

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/agent/watch"
	"github.com/meshd/meshd/codes"
)

// How changes reach workers (issue 32, docs/architecture.md): each
// control node keeps a watch.Table of what a worker copies from raft,
// rebuilt from its FSM after raft applies (watchTable), and serves it on
// GET /v1/watch: a stream of changes since the index the worker names,
// one JSON line each (watch.Change), the first as soon as the table is
// past that index, then one per change and a heartbeat between. A worker
// new to the cluster (index 0), or behind the table's floor, gets the
// whole table once; every later line carries only what changed. With
// `strict=1` the answer is one line after a read index through the
// leader: what a worker asks when told of a change its stream has not
// brought.

// PathWatch is the watch stream (and, with StrictQuery, the one-shot
// strict change).
const PathWatch = "/v1/watch"

// The sections of the watch table: what a worker copies.
const (
	SectionNodes   = "nodes"   // node id → watchRecord
	SectionRevoked = "revoked" // watch.Seq(i) → the i-th revoked fingerprint (the list only grows; its length is its version)
	SectionKeys    = "keys"    // keyKeys → GossipKeys (members only: the stream ends when the caller stops being one)
	SectionCA      = "ca"      // keyCA → CABundle
	keyKeys        = "ring"
	keyCA          = "bundle"
)

// watchHeartbeat spaces the lines of a stream with no change; a worker
// that hears nothing for WatchSilence ends the stream and asks another
// control node.
const (
	watchHeartbeat = 10 * time.Second
	WatchSilence   = 25 * time.Second
)

// watchLeaderless is how long a control node with no raft leader keeps a
// stream: longer than an election, so a leader change does not move
// every worker, short enough that a worker behind a cut-off control node
// moves to one that hears the cluster.
const watchLeaderless = 5 * time.Second

// watchReadyWait bounds how long a stream's first line waits for the
// table to hold what this node had applied when asked.
const watchReadyWait = 5 * time.Second

// watchGapMin is the least time between two rebuilds of the table; a
// rebuild waits at least twice as long as the last one took, so a burst
// of raft commands at 10,000 records costs a bounded share of a core.
const watchGapMin = 20 * time.Millisecond

// watchState is the table's content from v, the FSM's state at one
// index. The caller holds p.records.mu.
func (p *Plane) watchState(v state.View) map[string]map[string]json.RawMessage {
	nodes := map[string]json.RawMessage{}
	nodes0 := v.Nodes
	next := make(map[string]encodedRecord, len(nodes0))
	for _, n := range nodes0 {
		nodes[n.ID] = p.records.encode(n, next)
	}
	p.records.byID = next
	revoked := map[string]json.RawMessage{}
	byID := map[string]state.Node{}
	for _, n := range nodes0 {
		byID[n.ID] = n
	}
	for i, r := range v.Revocations {
		n, ok := byID[r.NodeID]
		revoked[watch.Seq(i)] = revokedItem(r, n, ok)
	}
	st := map[string]map[string]json.RawMessage{SectionNodes: nodes, SectionRevoked: revoked,
		SectionKeys: {}, SectionCA: {}}
	if cl, ok := v.Cluster, v.HasCluster; ok {
		if len(cl.GossipKeys) > 0 {
			st[SectionKeys][keyKeys] = mustJSON(GossipKeys{Keys: cl.GossipKeys, Rotated: cl.GossipKeysRotated})
		}
		st[SectionCA][keyCA] = mustJSON(BundleOf(cl))
	}
	return st
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil { // records, strings and byte slices always encode
		panic(err)
	}
	return b
}

// refreshTable brings the table to the FSM's state, read as of one index
// (state.FSM.View), so no item is ever stamped with an index its state
// does not hold.
func (p *Plane) refreshTable() {
	p.records.mu.Lock()
	defer p.records.mu.Unlock()
	v := p.raft.FSM().View()
	p.table.Update(v.Index, p.watchState(v))
}

// watchTable keeps the table in line with the FSM until stop: once at
// the start, then after raft applies, at most once per gap.
func (p *Plane) watchTable(stop <-chan struct{}) {
	applied := p.raft.FSM().Applied()
	for {
		start := time.Now()
		p.refreshTable()
		gap := max(watchGapMin, 2*time.Since(start))
		select {
		case <-stop:
			return
		case <-time.After(gap):
		}
		select {
		case <-stop:
			return
		case <-applied:
		}
	}
}

// WatchTable is this node's table (tests and the scale harness read it).
func (p *Plane) WatchTable() *watch.Table { return p.table }

// handleWatch serves a member the watch stream, or with strict=1 one
// change after a read index. The caller is judged again before each line:
// a node that stops being a member (removed, left, forgotten, or renewed
// onto a leaf its connection does not hold) gets no further line, the
// gossip keys included.
func (p *Plane) handleWatch(w http.ResponseWriter, r *http.Request, c Caller) {
	since, err := strconv.ParseUint(r.URL.Query().Get("index"), 10, 64)
	if err != nil {
		writeError(w, codes.Wrap(codes.BadRequest, fmt.Errorf("watch: index %q is not a raft index", r.URL.Query().Get("index"))))
		return
	}
	leaf := r.TLS.PeerCertificates[0]
	if r.URL.Query().Has("strict") {
		// A read index through the leader for each: behind a gate like
		// the node list (issue 52 item 11).
		if err := p.strict.passRequest(r, c); err != nil {
			writeError(w, err)
			return
		}
		p.watchOnce(w, r, since)
		return
	}
	ready, cancel := context.WithTimeout(r.Context(), watchReadyWait)
	unhook := p.streams.hook(cancel) // a stream not begun yet must not hold the stop either
	err = p.watchReady(ready, p.raft.FSM().Index())
	_ = unhook()
	cancel()
	if err != nil {
		if p.streams.ended() {
			err = codes.Wrap(codes.DaemonStopping, errors.New("watch: this control node is stopping"))
		}
		writeError(w, err)
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	// One timer per stream, for its heartbeat; the leader's absence is
	// watched once for every stream (leaderWatch): 10,000 streams
	// ticking every second cost a control node more at idle than all
	// their heartbeats.
	heartbeat := time.NewTimer(watchHeartbeat)
	defer heartbeat.Stop()
	beat, sent := false, false
	for {
		// The line first, then the caller judged by the FSM, which is at
		// least as far as the table the line came from: a line that holds
		// a removal, or anything after it, never reaches the removed node.
		line, ch, next := p.table.Encoded(since)
		if err := p.stillWatching(leaf); err != nil {
			p.log.Info("ended a watch: the caller is no longer a member", "code", codes.NotMember, "node", c.Name, "err", err)
			return
		}
		if ch.Index > since || ch.Full || !sent || beat {
			_ = rc.SetWriteDeadline(time.Now().Add(WatchSilence))
			if _, err := w.Write(line); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			since, sent, beat = max(since, ch.Index), true, false
			heartbeat.Reset(watchHeartbeat)
		}
		select {
		case <-r.Context().Done():
			return
		case <-next:
		case <-heartbeat.C:
			beat = true
		case <-p.leaders.gone():
			p.log.Debug("ended a watch: no raft leader", "node", c.Name, "for", watchLeaderless)
			return
		case <-p.streams.ctx.Done():
			return // the node stops: its server's shutdown must not wait on streams
		}
	}
}

// watchReady waits (within the request's bound) for the table to hold
// the FSM's state at index: a stream's first line carries what this node
// had applied when it was asked.
func (p *Plane) watchReady(ctx context.Context, index uint64) error {
	for {
		_, ch, next := p.table.Encoded(index) // cheap: nothing since index, or the table is behind
		if ch.Index >= index && (index > 0 || ch.Index > 0) {
			return nil
		}
		select {
		case <-ctx.Done():
			return codes.Wrap(codes.NoLeader, fmt.Errorf("watch: this control node's table did not reach index %d", index))
		case <-next:
		}
	}
}

// watchOnce answers one change after a strict read: the table holds at
// least what the leader had committed when the call arrived.
func (p *Plane) watchOnce(w http.ResponseWriter, r *http.Request, since uint64) {
	if err := p.strictRead(r.Context()); err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), strictReadWait)
	defer cancel()
	if err := p.watchReady(ctx, p.raft.FSM().Index()); err != nil {
		writeError(w, err)
		return
	}
	line, _, _ := p.table.Encoded(since)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(line)
}

// stillWatching is the check before each line of a stream: the caller's
// leaf still belongs to an active or joining member.
func (p *Plane) stillWatching(leaf *x509.Certificate) error {
	_, err := judgeLeaf(p.raft.FSM(), leaf)
	return err
}

// Gone is the ids of the departed nodes of a node list: with the
// revoked fingerprints, what every Nebula refuses (Revocations).
func Gone(list []NodeRecord) []string {
	var out []string
	for _, r := range list {
		if r.StateOf().Former() {
			out = append(out, r.ID)
		}
	}
	return out
}

// streamsEnd ends every watch stream at once (issue 54 item 4): a
// stopping control node's HTTP server waits for its handlers, and a
// stream's handler runs until its worker goes away, so SIGTERM of a
// control node that workers streamed from took 3.0 s (the runtime's
// bound on the server's shutdown) and admissions stalled meanwhile. The
// workers' streams fail over to another control node.
type streamsEnd struct {
	ctx context.Context // done once the streams end
	end func()
}

func newStreamsEnd() streamsEnd {
	ctx, cancel := context.WithCancel(context.Background())
	return streamsEnd{ctx: ctx, end: cancel}
}

// hook calls f once the streams end; unhook stops that (no goroutine
// until then: context.AfterFunc).
func (s *streamsEnd) hook(f func()) (unhook func() bool) { return context.AfterFunc(s.ctx, f) }

func (s *streamsEnd) ended() bool { return s.ctx.Err() != nil }

// EndStreams ends every watch stream this node serves, and any opened
// after: the runtime calls it before it shuts the control server down.
func (p *Plane) EndStreams() { p.streams.end() }
