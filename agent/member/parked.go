package member

import (
	"errors"
	"fmt"
	"sync"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/mesh"
)

// A userspace Nebula is not stopped inside the process: in v1.10.3 its
// Stop exited the process; v1.11 no longer does, but mesh has no teardown
// of its own userspace network stack yet (mesh.Mesh.Stop). Before, a runtime that stopped (leave, join
// --force) left it running on the Nebula port, and the next join in the
// same meshd failed with "address already in use" until a restart. Now
// the stopped runtime parks it here, cut off (no lighthouses, no static
// hosts), and the next runtime takes it over with a reload to its own
// config: that works when Nebula can reload the change (the same overlay
// address, which a rejoin under the same name keeps, since the admission
// reuses the former record, and the same role). Otherwise the join says
// so with codes.RestartNeeded. The zero value is ready; the agent keeps
// one for the life of the process (Options.Parked).
type Parked struct {
	mu  sync.Mutex
	m   *mesh.Mesh
	cfg mesh.Config // what it runs
}

// park takes m, which the stopping runtime could not stop, and cuts it
// off from every peer (best effort: a refused reload leaves it as it
// was, still on the old identity, which the cluster no longer lists).
func (p *Parked) park(m *mesh.Mesh, applied mesh.Config, log interface{ Warn(string, ...any) }) {
	cut := applied
	cut.Lighthouses, cut.StaticHosts = nil, nil
	if err := m.Reload(cut); err != nil {
		log.Warn("could not cut the parked userspace overlay off its peers", "code", codes.OrInternal(err), "err", err)
	} else {
		applied = cut
	}
	p.mu.Lock()
	p.m, p.cfg = m, applied
	p.mu.Unlock()
}

// Holds reports whether an overlay is parked here: its Nebula port stays
// bound in this process until the next runtime takes it over (a join's
// host checks count the port as this meshd's). Nil-safe: a kernel-mode
// meshd parks nothing.
func (p *Parked) Holds() bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m != nil
}

// take returns the parked Nebula reloaded to c, or nil when none is
// parked. A reload Nebula cannot do live leaves it parked and is
// codes.RestartNeeded.
func (p *Parked) take(c mesh.Config) (*mesh.Mesh, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		return nil, nil
	}
	if err := p.m.Reload(c); err != nil {
		if codes.Of(err) == codes.RestartNeeded {
			return nil, codes.Wrap(codes.RestartNeeded, fmt.Errorf("the userspace overlay of this meshd's earlier membership still runs in this process "+
				"(Nebula cannot stop it) and cannot take this identity live: %w; restart meshd and join again", errors.Unwrap(err)))
		}
		return nil, fmt.Errorf("take over the running userspace overlay: %w", err)
	}
	m := p.m
	p.m, p.cfg = nil, mesh.Config{}
	return m, nil
}
