package resolved

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"

	"github.com/godbus/dbus/v5"
)

// Link is what meshd asks of resolved for the overlay's interface.
type Link struct {
	IfIndex int        // the overlay TUN device's index
	IfName  string     // its name, for messages and the ifindex check ("nebula1")
	Server  netip.Addr // meshd's DNS on the overlay address (port 53)
	Domain  string     // the routing domain without "~" or final dot: "prod.mesh"
}

// Validate reports a Link that Ensure could not apply as meant.
func (l Link) Validate() error {
	switch {
	case l.IfIndex <= 0:
		return fmt.Errorf("resolved: link %q: ifindex %d is not an interface index", l.IfName, l.IfIndex)
	case l.IfName == "":
		return errors.New("resolved: link without a name")
	case !l.Server.IsValid() || l.Server.IsUnspecified():
		return fmt.Errorf("resolved: link %s: DNS server %v is not an address", l.IfName, l.Server)
	case l.Server.Zone() != "":
		return fmt.Errorf("resolved: link %s: DNS server %v has a zone; SetLinkDNS takes none", l.IfName, l.Server)
	case l.Domain == "" || strings.HasPrefix(l.Domain, "~") || strings.HasSuffix(l.Domain, ".") ||
		strings.ContainsAny(l.Domain, " \t\n,;"):
		return fmt.Errorf("resolved: link %s: domain %q must look like \"prod.mesh\" (no \"~\", no final dot)", l.IfName, l.Domain)
	}
	return nil
}

func (l Link) String() string { return fmt.Sprintf("%s (ifindex %d)", l.IfName, l.IfIndex) }

// dnsAddr is one entry of SetLinkDNS and of the DNS property: (iay), an
// address family (AF_INET, AF_INET6) and the address's bytes.
type dnsAddr struct {
	Family  int32
	Address []byte
}

// domain is one entry of SetLinkDomains and of the Domains property: (sb),
// the domain and whether it is routing-only (the "~" form).
type domain struct {
	Domain      string
	RoutingOnly bool
}

// linkState is the part of a resolved link's configuration that meshd owns.
type linkState struct {
	DNS          []dnsAddr
	Domains      []domain
	DefaultRoute bool
	LLMNR        string
	MulticastDNS string
	DNSSEC       string
}

// want is the state Ensure aims for.
func want(l Link) linkState {
	a := l.Server.Unmap()
	fam := int32(syscall.AF_INET6)
	if a.Is4() {
		fam = syscall.AF_INET
	}
	return linkState{
		DNS:          []dnsAddr{{Family: fam, Address: a.AsSlice()}},
		Domains:      []domain{{Domain: l.Domain, RoutingOnly: true}},
		DefaultRoute: false,
		LLMNR:        "no",
		MulticastDNS: "no",
		DNSSEC:       "no",
	}
}

// linkIface is the D-Bus interface of resolved's link objects.
const linkIface = "org.freedesktop.resolve1.Link"

// stateFromProps reads a linkState from the link object's properties
// (GetAll on org.freedesktop.resolve1.Link). A missing or mistyped
// property is an error: comparing against a guess would either flush the
// caches every 30 s or never repair anything.
func stateFromProps(props map[string]dbus.Variant) (linkState, error) {
	var s linkState
	for _, p := range []struct {
		name string
		dst  any
	}{
		{"DNS", &s.DNS},
		{"Domains", &s.Domains},
		{"DefaultRoute", &s.DefaultRoute},
		{"LLMNR", &s.LLMNR},
		{"MulticastDNS", &s.MulticastDNS},
		{"DNSSEC", &s.DNSSEC},
	} {
		v, ok := props[p.name]
		if !ok {
			return linkState{}, fmt.Errorf("link property %s missing", p.name)
		}
		if err := v.Store(p.dst); err != nil {
			return linkState{}, fmt.Errorf("link property %s (%s): %w", p.name, v.Signature(), err)
		}
	}
	return s, nil
}

// setter is one Manager call that moves a link towards the wanted state.
type setter struct {
	method string // "SetLinkDNS"
	arg    any    // the argument after the ifindex
}

// diff returns the setters for the properties where have differs from
// wantS, in a fixed order: servers before domains, so that resolved never
// routes the domain to a link without a server.
func diff(have, wantS linkState) []setter {
	var out []setter
	if !slices.EqualFunc(have.DNS, wantS.DNS, func(a, b dnsAddr) bool {
		return a.Family == b.Family && slices.Equal(a.Address, b.Address)
	}) {
		out = append(out, setter{"SetLinkDNS", wantS.DNS})
	}
	if !slices.EqualFunc(have.Domains, wantS.Domains, func(a, b domain) bool {
		return a.RoutingOnly == b.RoutingOnly &&
			strings.EqualFold(strings.TrimSuffix(a.Domain, "."), strings.TrimSuffix(b.Domain, "."))
	}) {
		out = append(out, setter{"SetLinkDomains", wantS.Domains})
	}
	if have.DefaultRoute != wantS.DefaultRoute {
		out = append(out, setter{"SetLinkDefaultRoute", wantS.DefaultRoute})
	}
	if have.LLMNR != wantS.LLMNR {
		out = append(out, setter{"SetLinkLLMNR", wantS.LLMNR})
	}
	if have.MulticastDNS != wantS.MulticastDNS {
		out = append(out, setter{"SetLinkMulticastDNS", wantS.MulticastDNS})
	}
	if have.DNSSEC != wantS.DNSSEC {
		out = append(out, setter{"SetLinkDNSSEC", wantS.DNSSEC})
	}
	return out
}
