package agent

import (
	"fmt"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
)

// startPolicy is the overlay policy a runtime starts with: the last
// reloaded one, else the startup config's.
func (a *Agent) startPolicy() config.Policy {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.reloaded != nil {
		return *a.reloaded
	}
	return a.cfg.Policy()
}

// reloadOverlay applies next's firewall and MTU: kept for a runtime that
// starts later, and applied to the running one (member.Runtime.
// ApplyPolicy), whose changed fields it returns. A node that is not a
// running member has nothing to apply.
func (a *Agent) reloadOverlay(next config.File) ([]string, []apitype.Warning) {
	want := next.Policy()
	a.mu.Lock()
	a.reloaded = &want // a runtime started later uses it
	rt := a.rt
	a.mu.Unlock()
	if rt == nil {
		return nil, nil
	}
	changed, ws := rt.ApplyPolicy(want)
	if len(changed) > 0 && len(ws) == 0 {
		a.log.Info("overlay firewall and MTU applied", "changed", fmt.Sprint(changed),
			"inbound_rules", len(want.Inbound), "outbound_rules", len(want.Outbound), "mtu", want.MTU)
	}
	return changed, ws
}
