package member

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/netcheck"
)

// The NAT a node is behind, learnt and told (issue 29). Each member runs
// the path check (Runtime.pathCheck) itself, shortly after start and
// every natCheckEvery after, and reports its NAT in the gossip tag
// tagNAT; agent/pathup asks noDirect, over both ends' tags, before it
// tries to move a relayed tunnel onto a direct path. Between two nodes
// behind NATs one of which is symmetric no try can succeed, and every try
// rebuilds the tunnel: a gap of 1.5-2 s in the pair's traffic, which the
// fast-timer gossip on the sites lab suspected the pair for six times in
// ten minutes. A node with no NAT in front of it offers no relays
// (desired.Inputs.SelfNoNAT); a change of its NAT wakes the overlay loop.

// tagNAT is the gossip tag a member reports its NAT in (NAT). Absent
// (a node of an older release, or one that has not checked yet) reads as
// natUnknown.
const tagNAT = "nat"

// NAT is a node's NAT as the path check saw it, short for a serf tag
// (the zero value reads as natUnknown).
type NAT string

const (
	natUnknown   NAT = "unk"  // not checked, blocked UDP, or fewer than two control nodes answered
	natOpen      NAT = "open" // every control node saw the node's own address: no NAT
	natPreserve  NAT = "pp"   // behind a NAT that keeps the source port
	natIndep     NAT = "ei"   // behind a NAT with one public port for every destination
	natSymmetric NAT = "sym"  // behind a NAT with a new port per destination
)

// NATOf is what rep says of the node's NAT; a nil report (the check
// could not run) says nothing.
func NATOf(rep *netcheck.Report) NAT {
	switch {
	case rep == nil || !rep.UDP:
		return natUnknown
	case !rep.NAT:
		return natOpen
	}
	switch rep.Mapping {
	case netcheck.MappingPortPreserving:
		return natPreserve
	case netcheck.MappingEndpointIndependent:
		return natIndep
	case netcheck.MappingSymmetric:
		return natSymmetric
	}
	return natUnknown
}

// noDirect is the rule: no direct path can exist between two nodes both
// behind a NAT when at least one of the NATs is symmetric (a symmetric
// NAT gives the packets towards the peer another port than the one the
// lighthouses saw, and the other NAT drops what arrives unasked). Not
// knowing either side is no reason: the pair is tried as before.
func noDirect(own, peer NAT) (string, bool) {
	behind := func(c NAT) bool { return c == natPreserve || c == natIndep || c == natSymmetric }
	if !behind(own) || !behind(peer) {
		return "", false
	}
	switch {
	case own == natSymmetric && peer == natSymmetric:
		return "both nodes behind symmetric NATs", true
	case own == natSymmetric:
		return "this node behind a symmetric NAT, the peer behind a NAT", true
	case peer == natSymmetric:
		return "the peer behind a symmetric NAT, this node behind a NAT", true
	}
	return "", false
}

// Pace of runNATCheck: a check that told the NAT is run again every
// natCheckEvery (the node may have moved networks); one that could not
// tell is run again after natRetryMin, doubling up to natRetryMax. In its
// first natRecordsFor a node with no other control node recorded yet (a
// worker joining for the first time has no node list at start) looks
// again every natRecordsEvery: until its peers know its NAT, pathup tries
// and rebuilds their relayed tunnels as before, so the sooner the better
// (the symmetric-NAT lab's pair was first skipped 3-5 s after the join
// with the doubling alone).
const (
	natCheckEvery   = 10 * time.Minute
	natRetryMin     = time.Second
	natRetryMax     = 2 * time.Minute
	natRecordsEvery = 250 * time.Millisecond
	natRecordsFor   = time.Minute
)

// natState is this node's NAT as its last path check saw it.
type natState struct {
	mu  sync.Mutex
	own NAT
}

func (s *natState) get() NAT {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.own == "" {
		return natUnknown
	}
	return s.own
}

func (s *natState) set(c NAT) (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed, s.own = s.own != c, c
	return changed
}

// runNATCheck runs the path check at once and then on natCheckEvery (or
// sooner while it cannot tell), and reports each result in this node's
// gossip tags, until ctx ends. It is a loop of its own: neither start nor
// a join's confirmation waits for it, and SetTags may wait out serf's
// broadcast timeout (runKeyReports).
func (rt *Runtime) runNATCheck(ctx context.Context) {
	retry, start := natRetryMin, rt.now()
	for wait := time.Duration(0); ; {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		rep, err := rt.pathCheck(ctx)
		c := NATOf(rep)
		switch {
		case c != natUnknown:
			wait, retry = natCheckEvery, natRetryMin
		case errors.Is(err, errNoOtherControl) && rt.now().Sub(start) < natRecordsFor:
			wait = natRecordsEvery // a joining worker gets its node list within moments
		default:
			wait, retry = retry, min(2*retry, natRetryMax)
		}
		if c == natUnknown {
			c = rt.nat.get() // a check that cannot tell (a control node restarting) keeps the last answer
		}
		if rt.nat.set(c) {
			rt.log.Info("path check: this node's NAT", "nat", string(c), "err", err, "next_in", wait)
			rt.poke()          // whether it offers relays follows (desired.Inputs.SelfNoNAT)
			rt.pathWake.ring() // pathup asks NoDirect again (pathwake.go)
		}
		rt.reportNAT(c)
		rt.offerNAT(c) // poolfacts.go: out of the pool, by the facts
	}
}

// reportNAT makes this node's tagNAT c, if it is not already.
func (rt *Runtime) reportNAT(c NAT) {
	if rt.gossip == nil || rt.gossip.LocalMember().Tags[tagNAT] == string(c) { // out of the pool: no tags (outofpool.go)
		return
	}
	if err := rt.gossip.UpdateTags(map[string]string{tagNAT: string(c)}); err != nil {
		rt.log.Warn("NAT not reported in gossip, or its broadcast not confirmed", "code", codes.OrInternal(err), "nat", string(c), "err", err)
	}
}

// peerNAT is the NAT the gossip member at overlay address ip reports. The
// member is found by the address it gossips from, which Nebula
// authenticates (gossip rides the overlay), not by the overlay address it
// claims in its tags.
func peerNAT(members []gossip.Member, ip netip.Addr) NAT {
	for _, m := range members {
		if m.Addr.Addr().Unmap() == ip {
			if c := NAT(m.Tags[tagNAT]); c != "" {
				return c
			}
			break
		}
	}
	return natUnknown
}

// noDirectTo is noDirect between this node and the member at overlay
// address ip (agent/pathup's Overlay.NoDirect).
func (rt *Runtime) noDirectTo(ip netip.Addr) (string, bool) {
	src := rt.peers() // liveness.go
	if src == nil {
		return "", false
	}
	return noDirect(rt.nat.get(), peerNAT(src.Members(), ip))
}
