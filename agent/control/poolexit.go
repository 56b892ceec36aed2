package control

import "time"

// A worker that leaves the gossip pool by a restart (an upgrade to the
// release where workers are out of it by default, or `gossip_pool: false`
// set) runs no memberlist to say goodbye: gossip marks it failed and keeps
// it listed, and a listed worker keeps gossip's word (outofpool.go), so
// every node list showed it failed while it ran (e2e.TestRollingUpgrade).
// This lighthouse hears it all the while: a worker gossip calls failed
// whose host update reached this node after gossip found it failed
// (LastSeen) left the pool rather than died (a dead one sends nothing
// after it died, which was before gossip noticed), and is pruned out of
// gossip's list; from then on it is judged by its record, as any worker
// out of the pool. A worker in the pool pruned while its gossip fails but
// its overlay works joins again at its next gossip rejoin.

// PruneLeftPool prunes out of gossip the workers it shows failed that
// this lighthouse heard since (a control duty, each follow pass), and
// returns the names pruned and, when a failed worker was heard here
// lately but not yet since (its next host update is due), how soon to
// look again: one lighthouse interval; zero when none is (a dead worker
// stops counting once unheard for three). Cost: gossip's members (the
// pool), a record looked up by name for the failed ones only.
func (p *Plane) PruneLeftPool() (pruned []string, again time.Duration) {
	lhp := p.lighthouse.Load()
	if lhp == nil || p.hooks.PruneFailed == nil {
		return nil, 0
	}
	lh := *lhp
	now := p.now()
	for name, st := range p.hooks.Gossip() {
		if st != "failed" {
			continue
		}
		n, ok := p.raft.FSM().NodeByName(name)
		if !ok || !judged(n) || !n.OverlayIP.IsValid() {
			continue
		}
		down, ok := p.hooks.LastSeen(name)
		if !ok {
			continue
		}
		age, heard := lh.Heard(n.OverlayIP)
		if !heard || age >= lh.After() {
			continue // silent here: dead, or cut off; the verdict decides
		}
		if !now.Add(-age).After(down) {
			again = lh.After() / 3 // heard lately, not since it failed: its next update tells
			continue
		}
		if err := p.hooks.PruneFailed(name); err != nil {
			p.log.Debug("a worker out of the pool not pruned from gossip", "node", name, "err", err)
			continue
		}
		p.log.Info("a worker gossip shows failed is heard by this lighthouse: out of the gossip pool, pruned from gossip's list",
			"node", name)
		pruned = append(pruned, name)
	}
	return pruned, again
}
