package mesh

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// FirewallRule is one rule of Nebula's overlay firewall, with Nebula's
// keys (firewall.inbound / firewall.outbound). A packet passes when some
// rule matches it: port AND proto AND (host OR group/groups OR cidr) AND
// local_cidr.
// Nebula drops everything no rule allows; replies to allowed traffic pass
// by connection tracking.
type FirewallRule struct {
	// Port is "any", a port ("443") or a range ("8000-8100"). An icmp rule
	// takes "any".
	Port string `yaml:"port" json:"port"`
	// Proto is any, tcp, udp or icmp.
	Proto string `yaml:"proto" json:"proto"`
	// Host is "any" (every holder of a valid cluster certificate) or one
	// node's name (the name in its certificate).
	Host string `yaml:"host,omitempty" json:"host,omitempty"`
	// Group matches certificates carrying that group; Groups those
	// carrying all of them. The groups are the roles (control, worker:
	// every certificate carries its role) and the node groups set at
	// admission (`meshctl admit NAME --group G`). At most one of the two.
	Group  string   `yaml:"group,omitempty" json:"group,omitempty"`
	Groups []string `yaml:"groups,omitempty" json:"groups,omitempty"`
	// CIDR matches the peer's overlay address ("10.42.0.0/24" or "any").
	CIDR string `yaml:"cidr,omitempty" json:"cidr,omitempty"`
	// LocalCIDR matches this node's end of the packet (the destination
	// inbound, the source outbound): "any", or an IPv4 prefix such as a
	// LAN this node routes ("192.168.50.0/24"). Empty means this node's
	// overlay address when its certificate holds routes (unsafe
	// networks) and any address otherwise (Nebula's rule), so traffic to
	// and from the prefixes a node routes passes only rules that name
	// local_cidr.
	LocalCIDR string `yaml:"local_cidr,omitempty" json:"local_cidr,omitempty"`
}

// AnyAny is meshd's default firewall for both directions: every holder
// of a valid cluster certificate may reach every port of this node, and
// every prefix it routes (a choice, see docs/security.md).
func AnyAny() []FirewallRule {
	return []FirewallRule{{Port: "any", Proto: "any", Host: "any", LocalCIDR: "any"}}
}

// FirewallError names the rule that is wrong ("inbound[1].port").
type FirewallError struct {
	Field string
	Value string
	Err   error
}

func (e *FirewallError) Error() string {
	return fmt.Sprintf("firewall.%s %q: %v", e.Field, e.Value, e.Err)
}

func (e *FirewallError) Unwrap() error { return e.Err }

// CheckFirewall checks the rules of one direction ("inbound" or
// "outbound") as Nebula v1.10.3 would read them, and more strictly: the
// first bad rule is returned with codes.FirewallRule and a
// *FirewallError naming it. An empty list is valid: it drops everything.
func CheckFirewall(direction string, rules []FirewallRule) error {
	for i, r := range rules {
		if field, value, err := checkRule(r); err != nil {
			return codes.Wrap(codes.FirewallRule, &FirewallError{Field: fmt.Sprintf("%s[%d].%s", direction, i, field), Value: value, Err: err})
		}
	}
	return nil
}

func checkRule(r FirewallRule) (field, value string, err error) {
	switch r.Proto {
	case "any", "tcp", "udp", "icmp":
	default:
		return "proto", r.Proto, fmt.Errorf("want any, tcp, udp or icmp")
	}
	if err := checkPort(r.Port); err != nil {
		return "port", r.Port, err
	}
	if r.Proto == "icmp" && r.Port != "any" {
		return "port", r.Port, fmt.Errorf("an icmp rule takes port any")
	}
	if r.Host == "" && r.Group == "" && len(r.Groups) == 0 && r.CIDR == "" {
		return "host", "", fmt.Errorf("a rule needs at least one of host, group, groups or cidr")
	}
	if r.Host != "" && r.Host != "any" {
		if !nodeName(r.Host) {
			return "host", r.Host, fmt.Errorf("want any or a node name (1-63 of a-z, 0-9, '-')")
		}
	}
	if r.Group != "" && len(r.Groups) > 0 {
		return "group", r.Group, fmt.Errorf("give group or groups, not both")
	}
	if r.Group != "" {
		if err := pki.CheckRuleGroup(r.Group); err != nil {
			return "group", r.Group, err
		}
	}
	for i, g := range r.Groups {
		if err := pki.CheckRuleGroup(g); err != nil {
			return fmt.Sprintf("groups[%d]", i), g, err
		}
	}
	if slices.Contains(r.Groups, "any") && len(r.Groups) > 1 {
		return "groups", strings.Join(r.Groups, ","), fmt.Errorf("any matches every certificate; with other groups the rule would ignore them")
	}
	if r.CIDR != "" && r.CIDR != "any" {
		if p, err := netip.ParsePrefix(r.CIDR); err != nil || !p.Addr().Is4() {
			return "cidr", r.CIDR, fmt.Errorf("want an IPv4 prefix such as 10.42.0.0/24, or any")
		}
	}
	if r.LocalCIDR != "" && r.LocalCIDR != "any" {
		if p, err := netip.ParsePrefix(r.LocalCIDR); err != nil || !p.Addr().Is4() {
			return "local_cidr", r.LocalCIDR, fmt.Errorf("want an IPv4 prefix such as 192.168.50.0/24, or any")
		}
	}
	return "", "", nil
}

// checkPort accepts "any", a port 1-65535 or a range "N-M" with N <= M.
func checkPort(s string) error {
	if s == "any" {
		return nil
	}
	lo, hi, isRange := strings.Cut(s, "-")
	if !isRange {
		hi = lo
	}
	a, errA := strconv.Atoi(lo)
	b, errB := strconv.Atoi(hi)
	if errA != nil || errB != nil || a < 1 || b > 65535 || a > b {
		return fmt.Errorf("want any, a port 1-65535 or a range such as 8000-8100")
	}
	return nil
}

// nodeName is enroll.ValidName's rule, which mesh may not import.
func nodeName(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := range len(s) {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
