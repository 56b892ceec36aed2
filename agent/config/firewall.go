package config

import (
	"errors"
	"slices"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/mesh"
)

// Firewall is meshd.yaml's firewall section: Nebula's overlay
// firewall, one list of rules per direction (mesh.FirewallRule: port,
// proto, host, group, groups, cidr). The groups a rule names are the roles
// (every Nebula certificate carries its node's role as a group) and the
// node groups set at admission (`meshctl admit NAME --group G`). The
// default is any/any both ways, today's behaviour and a choice
// (docs/security.md); a change is applied by `meshctl reload` or SIGHUP
// without restarting Nebula.
type Firewall struct {
	Inbound  []mesh.FirewallRule `yaml:"inbound"`
	Outbound []mesh.FirewallRule `yaml:"outbound"`
}

// DefaultFirewall is any/any in both directions.
func DefaultFirewall() Firewall {
	return Firewall{Inbound: mesh.AnyAny(), Outbound: mesh.AnyAny()}
}

// validate checks both directions with mesh.CheckFirewall
// (codes.FirewallRule naming the rule). A list written as null is refused:
// leave the key out for any/any, or write [] to drop everything.
func (f Firewall) validate() error {
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

// Policy is the part of the Nebula config a reload changes: the
// firewall and the MTU.
type Policy struct {
	Inbound, Outbound []mesh.FirewallRule
	MTU               int
}

// ReloadableOverlay are the yaml names of Policy's sources.
var ReloadableOverlay = []string{"firewall.inbound", "firewall.outbound", "overlay_mtu"}

func (c File) Policy() Policy {
	return Policy{Inbound: slices.Clone(c.Firewall.Inbound), Outbound: slices.Clone(c.Firewall.Outbound), MTU: c.OverlayMTU}
}

// apply sets m's firewall and MTU to p's.
func (p Policy) Apply(m *mesh.Config) {
	m.Inbound, m.Outbound, m.MTU = slices.Clone(p.Inbound), slices.Clone(p.Outbound), p.MTU
}
