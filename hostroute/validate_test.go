package hostroute

import (
	"net/netip"
	"testing"

	"github.com/meshd/meshd/codes"
)

func TestValidate(t *testing.T) {
	p := netip.MustParsePrefix
	overlay := p("10.42.0.0/16")
	routed := []netip.Prefix{p("192.168.50.0/24")}
	for name, c := range map[string]struct {
		f    Forward
		code codes.Code
	}{
		"ok":               {Forward{TunDev: "meshd0", Overlay: overlay, Routed: routed}, ""},
		"ok/exit":          {Forward{TunDev: "meshd0", Overlay: overlay, Routed: []netip.Prefix{p("0.0.0.0/0")}}, ""},
		"fail/no-tun":      {Forward{Overlay: overlay, Routed: routed}, codes.HostRouteInvalid},
		"fail/no-overlay":  {Forward{TunDev: "meshd0", Routed: routed}, codes.HostRouteInvalid},
		"fail/ipv6-route":  {Forward{TunDev: "meshd0", Overlay: overlay, Routed: []netip.Prefix{p("2001:db8::/32")}}, codes.HostRouteInvalid},
		"fail/4in6-route":  {Forward{TunDev: "meshd0", Overlay: overlay, Routed: []netip.Prefix{p("::ffff:192.168.50.0/120")}}, codes.HostRouteInvalid},
		"fail/zero-prefix": {Forward{TunDev: "meshd0", Overlay: overlay, Routed: []netip.Prefix{{}}}, codes.HostRouteInvalid},
	} {
		if got := codes.Of(c.f.validate()); got != c.code {
			t.Errorf("forward %s: code %q, want %q", name, got, c.code)
		}
	}

	ok := Exit{TunDev: "meshd0", Mark: 0x5a, Table: 52742, Priority: 5274, Exclude: []netip.Prefix{p("198.51.100.7/32")}}
	for name, c := range map[string]struct {
		edit func(*Exit)
		code codes.Code
	}{
		"ok":                       {func(*Exit) {}, ""},
		"ok/last-priority":         {func(e *Exit) { e.Priority = 32764 }, ""},
		"fail/priority-after-main": {func(e *Exit) { e.Priority = 52740 }, codes.HostRouteInvalid},
		"fail/priority-at-main":    {func(e *Exit) { e.Priority = 32765 }, codes.HostRouteInvalid},
		"fail/priority-zero":       {func(e *Exit) { e.Priority = 0 }, codes.HostRouteInvalid},
		"fail/table-main":          {func(e *Exit) { e.Table = 254 }, codes.HostRouteInvalid},
		"fail/table-local":         {func(e *Exit) { e.Table = 255 }, codes.HostRouteInvalid},
		"fail/table-zero":          {func(e *Exit) { e.Table = 0 }, codes.HostRouteInvalid},
		"fail/mark-zero":           {func(e *Exit) { e.Mark = 0 }, codes.HostRouteInvalid},
		"fail/no-tun":              {func(e *Exit) { e.TunDev = "" }, codes.HostRouteInvalid},
		"fail/ipv6-exclude":        {func(e *Exit) { e.Exclude = []netip.Prefix{p("2001:db8::1/128")} }, codes.HostRouteInvalid},
	} {
		e := ok
		c.edit(&e)
		if got := codes.Of(e.validate()); got != c.code {
			t.Errorf("exit %s: code %q, want %q", name, got, c.code)
		}
	}
}
