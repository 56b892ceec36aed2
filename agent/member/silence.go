package member

import (
	"context"
	"net/netip"
	"sort"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/mesh"
)

// A lighthouse's view of the members that stopped sending it host updates
// (Nebula patch 9). Every member sends each lighthouse (each control node)
// an update every lighthouse.interval, so one unheard for three intervals
// has stopped, or lost its way to this node. This is the first step of
// docs/architecture.md's "Gossip at 1,000 and 10,000 members" design, in
// which a worker's liveness comes from the control nodes: for now it is
// shown in a control node's status (overlay.silent), beside gossip's view,
// and it is the input of the raft leader's liveness verdict
// (agent/control/verdict.go: state.Node.Unheard), which asks the other
// control nodes before it decides; gossip still decides everything else.
//
// Cost (issue 54): one tick per lighthouse.interval, whose work is the
// members silent now (those it keeps re-checking and those newly silent:
// Nebula lists the longest silent first, so a tick reads no member that
// reported within the cutoff). Nothing here reads the node list; status
// matches the silent addresses to records when asked.

// silentCap bounds the members kept silent: past it the status says "at
// least" (silentMore).
const silentCap = 1024

// silentForget is how long a silent address is kept before it is dropped
// from the lighthouse's record (a member that left long ago).
const silentForget = 24 * time.Hour

// heardSource is what silence reads of Nebula: mesh.Mesh.
type heardSource interface {
	Silent(cutoff time.Time, n int) ([]mesh.HostHeard, int)
	Heard(addr netip.Addr) (time.Time, bool)
	ForgetHeard(addr netip.Addr)
}

// silence keeps the members this lighthouse stopped hearing from.
type silence struct {
	src   heardSource
	after time.Duration // unheard this long is silent
	tick  time.Duration
	now   func() time.Time

	began time.Time // when this lighthouse started listening (Listening)

	mu     sync.Mutex
	silent map[netip.Addr]time.Time // last heard
	more   bool                     // silentCap reached
	heard  int                      // members heard from in all
}

func newSilence(src heardSource, interval time.Duration, now func() time.Time) *silence {
	return &silence{src: src, after: 3 * interval, tick: interval, now: now, began: now(), silent: map[netip.Addr]time.Time{}}
}

// silence is the raft leader's liveness verdict's input and the answer
// to the other control nodes' questions (agent/control/heard.go).
var _ control.Lighthouse = (*silence)(nil)

// Silent is the members silent here as the last look found them.
func (s *silence) Silent() []netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]netip.Addr, 0, len(s.silent))
	for a := range s.silent {
		out = append(out, a)
	}
	return out
}

// Heard is how long ago addr last sent this lighthouse a host update.
func (s *silence) Heard(addr netip.Addr) (time.Duration, bool) {
	at, ok := s.src.Heard(addr)
	if !ok {
		return 0, false
	}
	return max(0, s.now().Sub(at)), true
}

// Listening is how long this lighthouse has taken host updates.
func (s *silence) Listening() time.Duration { return s.now().Sub(s.began) }

// After is three intervals: unheard this long is silent.
func (s *silence) After() time.Duration { return s.after }

// run looks once a tick until ctx ends.
func (s *silence) run(ctx context.Context) {
	t := time.NewTicker(s.tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.look()
		}
	}
}

// look drops the silent members heard from again (or silent so long they
// are forgotten) and adds the newly silent ones.
func (s *silence) look() {
	now := s.now()
	cutoff := now.Add(-s.after)
	s.mu.Lock()
	defer s.mu.Unlock()
	for addr := range s.silent {
		at, ok := s.src.Heard(addr)
		switch {
		case !ok:
			delete(s.silent, addr)
		case at.Before(now.Add(-silentForget)):
			s.src.ForgetHeard(addr)
			delete(s.silent, addr)
		case !at.Before(cutoff):
			delete(s.silent, addr) // heard again
		}
	}
	got, heard := s.src.Silent(cutoff, silentCap)
	s.heard, s.more = heard, len(got) == silentCap
	for _, h := range got {
		s.silent[h.Addr] = h.At
	}
}

// status lists the silent members by name, longest silent first, and
// how many members this lighthouse hears from. name maps an overlay
// address to a current member's name ("" for none: that address is left
// out, a member that left).
func (s *silence) status(name func(netip.Addr) string) (out []apitype.SilentMember, heard int, more bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for addr, at := range s.silent {
		if n := name(addr); n != "" {
			out = append(out, apitype.SilentMember{Name: n, OverlayIP: addr.String(), SilentSeconds: int(now.Sub(at) / time.Second)})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].SilentSeconds != out[j].SilentSeconds {
			return out[i].SilentSeconds > out[j].SilentSeconds
		}
		return out[i].Name < out[j].Name
	})
	return out, s.heard, s.more
}

// fillSilence adds this lighthouse's silent members to s.Overlay: the
// silent addresses matched to current members, by one pass over the
// records (at a status request, not on a timer).
func (rt *Runtime) fillSilence(o *apitype.Overlay) {
	if rt.silence == nil || o == nil {
		return
	}
	byAddr := map[string]string{}
	if recs, ok := rt.cluster.Records(); ok {
		for _, r := range recs {
			if !r.Active() {
				continue
			}
			byAddr[r.OverlayIP] = r.Name
			if r.OverlayIP6 != "" {
				byAddr[r.OverlayIP6] = r.Name
			}
		}
	}
	o.Silent, o.Heard, o.SilentMore = rt.silence.status(func(a netip.Addr) string { return byAddr[a.String()] })
}
