package agent

import (
	"fmt"
	"reflect"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/codes"
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

// policy is the overlay policy in force on rt (set at start, replaced by
// a reload).
func (rt *runtime) policy() config.Policy {
	rt.policyMu.Lock()
	defer rt.policyMu.Unlock()
	return rt.overlay
}

// overlayApplyWait bounds how long a reload waits for the overlay
// reconcile to apply a new firewall or MTU before it answers with a
// warning (the reconcile keeps trying; `meshctl status` shows a refusal).
const overlayApplyWait = 5 * time.Second

// reloadOverlay applies next's firewall and MTU to the running overlay
// (through the reconcile loop, which reloads Nebula without a restart) and
// returns the fields it changed. The policy it is compared with is the one
// in force, not the startup config, so a reload back to the old rules is
// applied too. A node that is not a running member has nothing to apply:
// the runtime it starts later reads the agent's config.
func (a *Agent) reloadOverlay(next config.File) ([]string, []apitype.Warning) {
	want := next.Policy()
	a.mu.Lock()
	a.reloaded = &want // a runtime started later uses it
	rt := a.rt
	a.mu.Unlock()
	if rt == nil {
		return nil, nil
	}
	cur := rt.policy()
	var changed []string
	if !reflect.DeepEqual(cur.Inbound, want.Inbound) {
		changed = append(changed, "firewall.inbound")
	}
	if !reflect.DeepEqual(cur.Outbound, want.Outbound) {
		changed = append(changed, "firewall.outbound")
	}
	if cur.MTU != want.MTU {
		changed = append(changed, "overlay_mtu")
	}
	if len(changed) == 0 {
		return nil, nil
	}
	rt.policyMu.Lock()
	rt.overlay = want
	rt.policyMu.Unlock()
	rt.poke()
	deadline := time.Now().Add(overlayApplyWait)
	for {
		applied := rt.applied()
		if reflect.DeepEqual(applied.Inbound, want.Inbound) && reflect.DeepEqual(applied.Outbound, want.Outbound) && applied.MTU == want.MTU {
			a.log.Info("overlay firewall and MTU applied", "changed", fmt.Sprint(changed),
				"inbound_rules", len(want.Inbound), "outbound_rules", len(want.Outbound), "mtu", want.MTU)
			return changed, nil
		}
		if time.Now().After(deadline) {
			detail := "the overlay reconcile has not applied " + fmt.Sprint(changed) + " yet"
			if b, _ := rt.overlayErr.Load().(errBox); b.err != nil {
				detail += ": " + b.err.Error()
			}
			return nil, []apitype.Warning{{Code: codes.OverlayApply, Detail: detail}}
		}
		time.Sleep(20 * time.Millisecond)
	}
}
