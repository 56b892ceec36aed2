package agent

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/mesh"
)

// FirewallConfig is meshd.yaml's firewall section: Nebula's overlay
// firewall, one list of rules per direction (mesh.FirewallRule: port,
// proto, host, group, groups, cidr). The groups a rule names are the roles
// (every Nebula certificate carries its node's role as a group) and the
// node groups set at admission (`meshctl admit NAME --group G`). The
// default is any/any both ways, today's behaviour and a choice
// (docs/security.md); a change is applied by `meshctl reload` or SIGHUP
// without restarting Nebula.
type FirewallConfig struct {
	Inbound  []mesh.FirewallRule `yaml:"inbound"`
	Outbound []mesh.FirewallRule `yaml:"outbound"`
}

// defaultFirewall is any/any in both directions.
func defaultFirewall() FirewallConfig {
	return FirewallConfig{Inbound: mesh.AnyAny(), Outbound: mesh.AnyAny()}
}

// validate checks both directions with mesh.CheckFirewall
// (codes.FirewallRule naming the rule). A list written as null is refused:
// leave the key out for any/any, or write [] to drop everything.
func (f FirewallConfig) validate() error {
	for _, d := range []struct {
		name  string
		rules []mesh.FirewallRule
	}{{"inbound", f.Inbound}, {"outbound", f.Outbound}} {
		if d.rules == nil {
			return codes.Wrap(codes.FirewallRule, &mesh.FirewallError{Field: d.name, Value: "null",
				Err: errors.New("leave the key out for the default any/any, or write [] to drop everything")})
		}
		if err := mesh.CheckFirewall(d.name, d.rules); err != nil {
			return err
		}
	}
	return nil
}

// overlayPolicy is the part of the Nebula config a reload changes: the
// firewall and the MTU.
type overlayPolicy struct {
	Inbound, Outbound []mesh.FirewallRule
	MTU               int
}

// reloadableOverlay are the yaml names of overlayPolicy's sources.
var reloadableOverlay = []string{"firewall.inbound", "firewall.outbound", "overlay_mtu"}

func (c FileConfig) overlayPolicy() overlayPolicy {
	return overlayPolicy{Inbound: slices.Clone(c.Firewall.Inbound), Outbound: slices.Clone(c.Firewall.Outbound), MTU: c.OverlayMTU}
}

// apply sets m's firewall and MTU to p's.
func (p overlayPolicy) apply(m *mesh.Config) {
	m.Inbound, m.Outbound, m.MTU = slices.Clone(p.Inbound), slices.Clone(p.Outbound), p.MTU
}

// startPolicy is the overlay policy a runtime starts with: the last
// reloaded one, else the startup config's.
func (a *Agent) startPolicy() overlayPolicy {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.reloaded != nil {
		return *a.reloaded
	}
	return a.cfg.overlayPolicy()
}

// policy is the overlay policy in force on rt (set at start, replaced by
// a reload).
func (rt *runtime) policy() overlayPolicy {
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
func (a *Agent) reloadOverlay(next FileConfig) ([]string, []apitype.Warning) {
	want := next.overlayPolicy()
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
