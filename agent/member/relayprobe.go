package member

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/mesh"
)

// A worker out of the gossip pool has no suspicion of a relay: it reads
// the control nodes' liveness from their records, which a killed control
// node does not change, so relaysDown never named a tunnel whose relay
// died and the pair waited for Nebula's own connection test (5 s + 10 s
// at lan timers; e2e.TestNATSymmetricRelayed lost its pair past 5 s).
// So, out of the pool, each look of runRelayDown while a relayed tunnel
// exists also probes the first relay of each (reachAddr: a TCP connection
// through Nebula; a reset is an answer), all at once, within
// relayProbeTimeout, and a relay that does not answer counts as suspect;
// the look comes again every relayProbeEvery while relayed tunnels
// remain. Cost: one probe per relay in use (a handful: the control
// nodes and volunteers), a second, and only while this node has a
// relayed tunnel; nothing with none.
const (
	relayProbeEvery   = time.Second
	relayProbeTimeout = time.Second
)

// relaysUnanswered probes the first relay of each of tunnels (each relay
// once) and returns those that did not answer within relayProbeTimeout,
// as suspect.
func (rt *Runtime) relaysUnanswered(tunnels []mesh.Tunnel) map[netip.Addr]gossip.Status {
	first := map[netip.Addr]bool{}
	for _, t := range tunnels {
		if t.Relayed && len(t.Relays) > 0 {
			first[t.Relays[0]] = true
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), relayProbeTimeout)
	defer cancel()
	var (
		mu   sync.Mutex
		down = map[netip.Addr]gossip.Status{}
		wg   sync.WaitGroup
	)
	for ip := range first {
		wg.Go(func() {
			if rt.reachAddr(ctx, netip.AddrPortFrom(ip, uint16(rt.ports.Gossip))) != nil {
				mu.Lock()
				down[ip] = gossip.StatusSuspect
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return down
}
