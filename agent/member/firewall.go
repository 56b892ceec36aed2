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
func (ov *overlay) policy() config.Policy {
	ov.policyMu.Lock()
	defer ov.policyMu.Unlock()
	return ov.inForce
}

// overlayApplyWait bounds how long a reload waits for the overlay
// reconcile to apply a new firewall or MTU before it answers with a
// warning (the reconcile keeps trying; `meshctl status` shows a refusal).
const overlayApplyWait = 5 * time.Second

// applyPolicy applies a reload's firewall and MTU to the running overlay
// (through the overlay loop, which reloads Nebula without a restart) and
// returns the fields it changed. The policy it is compared with is the one
// in force, not the startup config, so a reload back to the old rules is
// applied too.
func (ov *overlay) applyPolicy(want config.Policy) ([]string, []apitype.Warning) {
	cur := ov.policy()
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
	ov.policyMu.Lock()
	ov.inForce = want
	ov.policyMu.Unlock()
	ov.poke()
	deadline := time.Now().Add(overlayApplyWait)
	for {
		applied := ov.applied()
		if reflect.DeepEqual(applied.Inbound, want.Inbound) && reflect.DeepEqual(applied.Outbound, want.Outbound) && applied.MTU == want.MTU {
			ov.log.Info("overlay firewall and MTU applied", "changed", fmt.Sprint(changed),
				"inbound_rules", len(want.Inbound), "outbound_rules", len(want.Outbound), "mtu", want.MTU)
			return changed, nil
		}
		if time.Now().After(deadline) {
			detail := "the overlay reconcile has not applied " + fmt.Sprint(changed) + " yet"
			if b, _ := ov.overlayErr.Load().(errBox); b.err != nil {
				detail += ": " + b.err.Error()
			}
			return nil, []apitype.Warning{{Code: codes.OverlayApply, Detail: detail}}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ApplyPolicy applies a reload's firewall and MTU to the running overlay
// and returns the fields it changed, or a warning when the overlay has
// not applied them within overlayApplyWait.
func (rt *Runtime) ApplyPolicy(want config.Policy) ([]string, []apitype.Warning) {
	return rt.ov.applyPolicy(want)
}
