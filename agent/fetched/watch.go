package fetched

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/watch"
	"github.com/meshd/meshd/codes"
)

// How a worker follows the cluster (issue 32, docs/architecture.md "How
// changes reach workers"): one watch stream at a time to one control
// node (GET /v1/watch, agent/control/watch.go), from the index of the
// last change it applied: the whole table on first contact (or when it
// fell behind what the control node remembers), then only what changed.
// A stream that ends, fails or stays silent for control.WatchSilence is
// opened again on the next control node. While no stream is healthy, a
// refresh asks for one change after a read index (strict=1) instead, at
// most once a second: the safety net the polling of earlier releases
// was, now only for a worker that cannot stream.

// followState is the stream's side of Copies.
type followState struct {
	mu         sync.Mutex
	copy       watch.Copy
	revoked    []string // the revoked section's fingerprints, decoded when it changes (the node records are c.nodes')
	revVersion int      // how many revocation items it holds
	keys       *control.GossipKeys
	ca         *control.CABundle
	applyMu    sync.Mutex // held through applyChange (f.mu only while the copy is read or written)
	open       bool       // a stream is open
	heard      time.Time  // its last line
	down       time.Time  // when the last stream ended (or the follower started)
	changedAt  time.Time  // the last line that changed something
	saved      time.Time  // the node list was last saved
	dirty      bool       // the node list changed since
	dirtyCtl   bool       // a control node's record among the changes: saved at once
	turn       int        // the seed the next stream asks, in Seeds' order
	notServed  int        // control nodes that served no watch since the last stream that opened (legacy.go)
	stats      WatchStats
	onChange   func(sections []string)
	rnd        func(time.Duration) time.Duration // the retries' random source (retry.go); nil: randN
	// strict paces the strict fallback as the node list's fetch was.
	strictMu    sync.Mutex
	strictAt    time.Time
	strictTried time.Time
}

// Watch timings (the retries' are in retry.go).
const (
	// watchGrace is how long a refresh leaves a stream that is not healthy
	// yet (connecting, or moving to another control node) before asking a
	// strict change itself.
	watchGrace = 2 * time.Second
	// saveEvery spaces the saves of the node list (a line that follows
	// saves one still owed, a heartbeat's too; a stream that ends saves at
	// once, and so does a change of a control node's record, which
	// decides the control leaves a restarted worker accepts). A save
	// writes every record: 10,000 of them took 80 ms of CPU, every 10 s
	// during churn a share of every change (issue 54). The list on disk
	// serves only a restart, which then follows the stream from a whole
	// table within a second; the workers' records in it may be up to
	// saveEvery old after a crash.
	saveEvery = 5 * time.Minute
	// toldGrace: a gossip notice of a change (a removal's, a key
	// rotation's) that arrives within this of the stream's last change is
	// taken to be about that change, and asks nothing more. The stream
	// brings a change within milliseconds of raft applying it, a notice
	// spreads over gossip in up to a second or two at 1,000 members.
	toldGrace = 5 * time.Second
)

// Follow keeps the copies in line with the control nodes until ctx ends:
// one stream at a time, on the next control node whenever one ends.
// onChange (may be nil) is told which sections a change touched (nodes,
// revoked, keys, ca), after the copies hold it. While the node is judged
// removed (standing.go) no stream is opened: Refresh asks once per
// RemovedRetry, and the streams start again once an answer accepts it.
func (c *Copies) Follow(ctx context.Context, onChange func(sections []string)) {
	c.follow.mu.Lock()
	c.follow.onChange = onChange
	c.follow.down = time.Now()
	c.follow.mu.Unlock()
	backoff := watchRetryMin
	for {
		c.standing.awaitKnown(ctx, func() {
			if onChange != nil {
				onChange(nil) // wakes the follow pass, whose Refresh asks
			}
		})
		if ctx.Err() != nil {
			return
		}
		seeds := c.Seeds()
		c.follow.mu.Lock()
		seed := ""
		if len(seeds) > 0 {
			seed = seeds[c.follow.turn%len(seeds)]
		}
		c.follow.turn++
		c.follow.mu.Unlock()
		useful, err := c.stream(ctx, seed)
		if ctx.Err() != nil {
			return
		}
		if useful {
			backoff = watchRetryMin
		} else {
			backoff = min(2*backoff, watchRetryMax)
		}
		c.follow.mu.Lock()
		rnd := c.follow.rnd
		c.follow.mu.Unlock()
		c.nodes.mu.Lock()
		members := len(c.nodes.recs)
		c.nodes.mu.Unlock()
		if rnd == nil {
			rnd = randN
		}
		wait := retryWait(useful, backoff, members, rnd)
		if w := c.notServedBy(err, useful); w > 0 {
			wait = w/2 + rnd(w/2) // no control node serves a watch: legacy.go polls meanwhile
		}
		c.log.Debug("watch stream ended; asking the next control node", "from", seed, "err", err, "retry", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// stream reads one watch stream from seed until it ends, fails, or stays
// silent past control.WatchSilence. useful: it applied a line.
func (c *Copies) stream(ctx context.Context, seed string) (useful bool, err error) {
	if seed == "" {
		return false, errors.New("no control node known")
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	silence := time.AfterFunc(control.WatchSilence, cancel)
	defer silence.Stop()
	c.follow.mu.Lock()
	since := c.follow.copy.Index()
	c.follow.mu.Unlock()
	body, err := c.client.Stream(sctx, seed, control.PathWatch+"?index="+strconv.FormatUint(since, 10))
	if ctx.Err() == nil {
		c.standing.Answer(seed, c.Seeds(), err)
	}
	if err != nil {
		c.setListErr(err)
		return false, err
	}
	defer body.Close()
	c.follow.mu.Lock()
	c.follow.open, c.follow.stats.From = true, seed
	c.follow.stats.Streams++
	c.follow.mu.Unlock()
	defer func() {
		c.follow.mu.Lock()
		c.follow.open, c.follow.stats.From, c.follow.down = false, "", time.Now()
		c.follow.mu.Unlock()
		c.saveIfOwed(true)
	}()
	err = watch.ReadStream(body, func(ch watch.Change, size int) error {
		silence.Reset(control.WatchSilence)
		if _, err := c.applyChange(ch, size); err != nil {
			c.setListErr(err)
			return err
		}
		useful = true
		return nil
	})
	return useful, err
}

// applyChange applies one change (from a stream or a strict answer) to
// the copies and tells onChange; it reports whether the node list or the
// revocations changed. A full table without this node (from a control
// node behind its admission) is refused: nothing of it is applied.
func (c *Copies) applyChange(ch watch.Change, size int) (changed bool, err error) {
	f := &c.follow
	// One change at a time from here to the lists adopted: the stream and
	// a strict ask may both apply one, and a list computed first must not
	// be adopted last.
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	f.mu.Lock()
	if ch.Full {
		if _, ok := ch.Put[control.SectionNodes][c.nodeID]; !ok {
			f.mu.Unlock()
			return false, errors.New("a node list without this node (from a control node behind the leader); not adopted")
		}
	}
	f.stats.Lines++
	f.stats.Bytes += int64(size)
	f.heard = time.Now()
	sections := f.copy.Apply(ch)
	f.stats.Index = f.copy.Index()
	switch {
	case ch.Full:
		f.stats.Full++
	case !ch.Empty():
		f.stats.Deltas++
	}
	if len(sections) == 0 {
		f.mu.Unlock()
		c.setListErr(nil)
		c.saveIfOwed(false)
		return false, nil
	}
	f.changedAt = f.heard
	var decodeErr error
	var whole map[string]control.NodeRecord // a whole table's records
	var put []control.NodeRecord            // a delta's
	var del []string
	switch {
	case ch.Full && slices.Contains(sections, control.SectionNodes):
		// A whole table that changed the nodes: decode them all again. A
		// whole table that did not (a second one, a strict ask answered
		// from index 0 beside the stream's) leaves the decoded records as
		// they are: starting them afresh from its changes alone dropped
		// every record but the next change's (found by
		// e2e.TestAuditTrail: a worker then refused every control node).
		whole = map[string]control.NodeRecord{}
		decodeErr = decodeInto(whole, ch.Put[control.SectionNodes])
	case slices.Contains(sections, control.SectionNodes):
		put, del, decodeErr = decodeDelta(ch)
	}
	if slices.Contains(sections, control.SectionRevoked) {
		if err := f.decodeRevoked(); err != nil {
			decodeErr = err
		}
	}
	revoked, revVersion := f.revoked, f.revVersion
	if raw, ok := f.copy.Item(control.SectionKeys, "ring"); ok && slices.Contains(sections, control.SectionKeys) {
		var gk control.GossipKeys
		if json.Unmarshal(raw, &gk) == nil {
			f.keys = &gk
		}
	}
	if raw, ok := f.copy.Item(control.SectionCA, "bundle"); ok && slices.Contains(sections, control.SectionCA) {
		var b control.CABundle
		if json.Unmarshal(raw, &b) == nil {
			f.ca = &b
		}
	}
	onChange := f.onChange
	f.mu.Unlock()
	if decodeErr != nil {
		c.log.Warn("a watched node record did not decode; kept the rest", "code", codes.Internal, "err", decodeErr)
	}
	nodes := slices.Contains(sections, control.SectionNodes)
	if nodes {
		// The list takes the change at its cost (recordlog.go): no copy
		// of the list, no scan of it, unless a control node's record
		// changed (then the leaves it accepts are looked at again).
		c.nodes.mu.Lock()
		controls := true
		if whole != nil {
			c.nodes.setWhole(whole)
		} else {
			controls = c.nodes.apply(put, del)
		}
		var leaves control.ServerCheck
		if controls {
			leaves = control.ActiveControlLeaves(c.nodes.controls)
		}
		own, ownOK := c.nodes.recs[c.nodeID]
		c.nodes.mu.Unlock()
		if controls {
			c.client.CheckServers(leaves)
		}
		c.markDirty(controls)
		c.judgeOwn(own, ownOK)
	}
	if nodes || slices.Contains(sections, control.SectionRevoked) {
		c.nodes.mu.Lock()
		rev := control.Revocations{Fingerprints: revoked, Version: revVersion, Gone: c.nodes.gone}
		c.nodes.mu.Unlock()
		if rev.Fingerprints == nil {
			rev.Fingerprints = []string{}
		}
		c.revoked.mu.Lock()
		c.revoked.list = rev
		c.revoked.mu.Unlock()
	}
	c.setListErr(nil)
	c.saveIfOwed(false)
	if onChange != nil {
		onChange(sections)
	}
	return nodes || slices.Contains(sections, control.SectionRevoked), nil
}

// adoptList makes list the whole node list (a saved one, a legacy
// fetch), O(records): from now on it decides which control leaves the
// worker accepts.
func (c *Copies) adoptList(list []control.NodeRecord) {
	recs := make(map[string]control.NodeRecord, len(list))
	for _, r := range list {
		recs[r.ID] = r
	}
	c.nodes.mu.Lock()
	c.nodes.setWhole(recs)
	leaves := control.ActiveControlLeaves(c.nodes.controls)
	c.nodes.mu.Unlock()
	c.client.CheckServers(leaves)
}

func (c *Copies) setListErr(err error) {
	c.nodes.mu.Lock()
	c.nodes.err = err
	c.nodes.mu.Unlock()
}

// streaming reports whether a stream is open and heard from within
// control.WatchSilence, whether it changed something within toldGrace,
// and how long no stream has been healthy.
func (c *Copies) streaming() (healthy, recent bool, downFor time.Duration) {
	f := &c.follow
	f.mu.Lock()
	defer f.mu.Unlock()
	healthy = f.open && time.Since(f.heard) < control.WatchSilence
	if f.down.IsZero() {
		return healthy, false, time.Hour // no follower: every refresh asks
	}
	return healthy, time.Since(f.changedAt) < toldGrace, time.Since(f.down)
}

// strictDue reports whether an ask without a stream is due (at once
// when told, otherwise at most once a second, every 200 ms after a
// failure), and if so notes the attempt. The caller holds strictMu.
func (f *followState) strictDue(told bool) bool {
	if !told && (time.Since(f.strictAt) < time.Second || time.Since(f.strictTried) < nodeListRetry) {
		return false
	}
	f.strictTried = time.Now()
	return true
}

// strictChange asks the control nodes for one change since the copy's
// index after a read index (PathWatch with strict=1): at once when told,
// otherwise at most once a second (every 200 ms after a failure), one at
// a time.
func (c *Copies) strictChange(ctx context.Context, told bool) (changed bool, err error) {
	f := &c.follow
	f.strictMu.Lock()
	defer f.strictMu.Unlock()
	if !f.strictDue(told) {
		return false, c.NodeListErr()
	}
	f.mu.Lock()
	since := f.copy.Index()
	f.stats.Strict++
	f.mu.Unlock()
	fctx, cancel := context.WithTimeout(ctx, fetchBudget)
	defer cancel()
	var ch watch.Change
	err = c.askRound(fctx, control.PathWatch+"?index="+strconv.FormatUint(since, 10)+"&strict=1", &ch)
	if err == nil {
		changed, err = c.applyChange(ch, 0)
	}
	if err != nil {
		c.setListErr(err)
		c.log.Debug("strict change not applied", "err", err)
		return false, err
	}
	f.strictAt = time.Now()
	return changed, nil
}
