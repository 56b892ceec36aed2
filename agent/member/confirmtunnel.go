package member

import (
	"context"
	"net/netip"
)

// waitAnyTunnel waits (with wait, mesh.WaitTunnel) for a tunnel to any of
// the lighthouses at once and returns the first one up. A join out of the
// gossip pool reads a control node's liveness from its record, so a
// control node that is down but not removed looks alive: waiting for the
// lowest one alone (as in the pool, where gossip vouches for it) would
// time out on it (e2e.TestCABackupRestore, the dead CA holder c1 first).
// Control nodes only: a handful of waits at any cluster size. Without any
// tunnel by ctx's end, the error is the first lighthouse's.
func waitAnyTunnel(ctx context.Context, lighthouses []netip.Addr, wait func(context.Context, netip.Addr) error) (netip.Addr, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the others' waits end with the first tunnel
	type result struct {
		i   int
		err error
	}
	done := make(chan result, len(lighthouses))
	for i, lh := range lighthouses {
		go func() { done <- result{i, wait(ctx, lh)} }()
	}
	errs := make([]error, len(lighthouses))
	for range lighthouses {
		r := <-done
		if r.err == nil {
			return lighthouses[r.i], nil
		}
		errs[r.i] = r.err
	}
	return netip.Addr{}, errs[0]
}
