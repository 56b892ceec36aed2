package control

import (
	"context"
	"net/netip"
	"slices"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
)

// Failover of a routed prefix (issue 33 item 2). The raft leader probes
// the carrier of every prefix that has a second approved router, over the
// overlay (Hooks.Reach: a TCP connection to its gossip port through
// Nebula, answered only by that node's certificate), every CarrierEvery.
// CarrierMisses failed probes in a row, or gossip showing it failed or
// left, and the prefix moves to the standby approved first that answers a
// probe now (state.SetCarrier, compare-and-set on the carrier it saw).
// Nothing moves it back: a carrier that returns stands by, until an
// operator moves the prefix (`meshctl routes prefer`) or the new carrier
// fails in turn, so a router that comes and goes does not make the
// prefix flap. Gossip alone would be too slow: at `timers: lan` memberlist
// declares a node failed after 5 s or more, and the issue asks for 3 s.
//
// A leader cut off from a carrier that others still reach moves the
// prefix anyway: one view decides, so every member follows the same
// carrier.

// The failover's timing: a dead carrier is seen within about
// CarrierEvery + CarrierMisses × (CarrierTimeout + CarrierEvery), 1.75 s.
// These are the same for every timers profile: they cost one TCP
// connection per HA prefix every quarter second, on the leader only.
const (
	CarrierEvery   = 250 * time.Millisecond
	CarrierTimeout = 500 * time.Millisecond
	CarrierMisses  = 2
)

// carrierWatch is the leader's count of each carrier's failed probes.
type carrierWatch struct {
	misses map[string]int        // by node id
	stuck  map[netip.Prefix]bool // down, no standby answered: said once
	// ha is haPrefixes of the records at raft index at: a tick reads the
	// records again only when raft applied something since (issue 54: it
	// copied every record four times a second).
	ha []haPrefix
	at uint64
	ok bool
}

// prefixes is haPrefixes of the records now, computed again only when
// raft's index moved.
func (w *carrierWatch) prefixes(f fsmReader) []haPrefix {
	if idx := f.Index(); !w.ok || idx != w.at {
		w.ha, w.at, w.ok = haPrefixes(f.Nodes()), idx, true
	}
	return w.ha
}

// fsmReader is what carrierWatch reads of the FSM.
type fsmReader interface {
	Index() uint64
	Nodes() []state.Node
}

// WatchCarriers runs the failover until ctx ends (the runtime spawns it on
// every control node): it ticks only while this node leads
// (raftnode.WhileLeader), each term with a fresh count of misses.
func (p *Plane) WatchCarriers(ctx context.Context) {
	p.raft.WhileLeader(ctx, func(ctx context.Context) {
		tick := time.NewTicker(CarrierEvery)
		defer tick.Stop()
		w := &carrierWatch{misses: map[string]int{}, stuck: map[netip.Prefix]bool{}}
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if p.hooks.Reach != nil {
				p.checkCarriers(ctx, w)
			}
		}
	})
}

// haPrefix is a prefix with a second approved router: its carrier and the
// others, approved first first.
type haPrefix struct {
	prefix   netip.Prefix
	carrier  state.Node
	standbys []state.Node
}

// haPrefixes lists the prefixes with a carrier and at least one standby.
func haPrefixes(nodes []state.Node) []haPrefix {
	byPrefix := map[netip.Prefix]*haPrefix{}
	var order []netip.Prefix
	for _, n := range nodes {
		if n.State != state.NodeActive {
			continue
		}
		for _, r := range n.Routes {
			if !r.Approved || r.Exit() {
				continue
			}
			h := byPrefix[r.Prefix]
			if h == nil {
				h = &haPrefix{prefix: r.Prefix}
				byPrefix[r.Prefix] = h
				order = append(order, r.Prefix)
			}
			if r.Carrier {
				h.carrier = n
			} else {
				h.standbys = append(h.standbys, n)
			}
		}
	}
	slices.SortFunc(order, netip.Prefix.Compare)
	var out []haPrefix
	for _, p := range order {
		h := byPrefix[p]
		if h.carrier.ID == "" || len(h.standbys) == 0 {
			continue
		}
		slices.SortFunc(h.standbys, func(a, b state.Node) int {
			return approvedAt(a, p).Compare(approvedAt(b, p))
		})
		out = append(out, *h)
	}
	return out
}

func approvedAt(n state.Node, p netip.Prefix) time.Time {
	for _, r := range n.Routes {
		if r.Prefix == p {
			return r.ApprovedAt
		}
	}
	return time.Time{}
}

// checkCarriers is one round: probe each HA prefix's carrier once (each
// carrier once, however many prefixes it carries), move the prefixes of
// one that is down.
func (p *Plane) checkCarriers(ctx context.Context, w *carrierWatch) {
	ha := w.prefixes(p.raft.FSM())
	if len(ha) == 0 {
		clear(w.misses)
		return
	}
	gossip := p.gossipView() // outofpool.go
	down := map[string]bool{}
	probed := map[string]bool{}
	for _, h := range ha {
		c := h.carrier
		if probed[c.ID] {
			continue
		}
		probed[c.ID] = true
		if st := gossip[c.Name]; st == "failed" || st == "left" {
			down[c.ID] = true
			continue
		}
		if p.reach(ctx, c.OverlayIP) == nil {
			delete(w.misses, c.ID)
			continue
		}
		w.misses[c.ID]++
		down[c.ID] = w.misses[c.ID] >= CarrierMisses
	}
	for id := range w.misses {
		if !probed[id] {
			delete(w.misses, id)
		}
	}
	for _, h := range ha {
		if !down[h.carrier.ID] {
			delete(w.stuck, h.prefix)
			continue
		}
		moved := p.failOver(ctx, h, gossip)
		if !moved && !w.stuck[h.prefix] {
			p.log.Warn("routed prefix's carrier is down and no standby answers: it stays", "prefix", h.prefix, "carrier", h.carrier.Name)
		}
		w.stuck[h.prefix] = !moved
	}
}

// failOver moves h's prefix to its first standby that answers now, and
// reports whether it did.
func (p *Plane) failOver(ctx context.Context, h haPrefix, gossip map[string]string) bool {
	for _, s := range h.standbys {
		if st := gossip[s.Name]; st == "failed" || st == "left" {
			continue
		}
		if p.reach(ctx, s.OverlayIP) != nil {
			continue
		}
		err := p.Write(ctx, &state.SetCarrier{Prefix: h.prefix, NodeID: s.ID, From: h.carrier.ID, Reason: "carrier down",
			At: p.now().UTC(), Actor: p.self()})
		if err != nil {
			p.log.Warn("route failover not recorded", "code", codes.OrInternal(err), "prefix", h.prefix, "from", h.carrier.Name, "to", s.Name, "err", err)
			return false
		}
		p.log.Warn("routed prefix moved: its carrier does not answer over the overlay", "code", codes.EventCarrierMoved,
			"prefix", h.prefix, "from", h.carrier.Name, "to", s.Name)
		p.told()
		return true
	}
	return false
}

// reach is one probe within CarrierTimeout.
func (p *Plane) reach(ctx context.Context, ip netip.Addr) error {
	pctx, cancel := context.WithTimeout(ctx, CarrierTimeout)
	defer cancel()
	return p.hooks.Reach(pctx, ip)
}
