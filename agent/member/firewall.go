package member

import (
	"fmt"
	"reflect"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/codes"
)

// policy is the overlay policy in force on rt (set at start, replaced by
// a reload).
func (rt *Runtime) policy() config.Policy {
	rt.policyMu.Lock()
	defer rt.policyMu.Unlock()
	return rt.overlay
}

// overlayApplyWait bounds how long a reload waits for the overlay
// reconcile to apply a new firewall or MTU before it answers with a
// warning (the reconcile keeps trying; `meshctl status` shows a refusal).
const overlayApplyWait = 5 * time.Second

// ApplyPolicy applies a reload's firewall and MTU to the running overlay
// (through the overlay loop, which reloads Nebula without a restart) and
// returns the fields it changed. The policy it is compared with is the one
// in force, not the startup config, so a reload back to the old rules is
// applied too.
func (rt *Runtime) ApplyPolicy(want config.Policy) ([]string, []apitype.Warning) {
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
			rt.log.Info("overlay firewall and MTU applied", "changed", fmt.Sprint(changed),
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
