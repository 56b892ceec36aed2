package resolved

import (
	"errors"
	"net"
	"net/netip"
	"reflect"
	"syscall"
	"testing"
)

// The signatures resolved's Manager takes (org.freedesktop.resolve1(5)).
var signatures = map[string]string{
	"GetLink":             "i",
	"GetAll":              "s",
	"SetLinkDNS":          "ia(iay)",
	"SetLinkDomains":      "ia(sb)",
	"SetLinkDefaultRoute": "ib",
	"SetLinkLLMNR":        "is",
	"SetLinkMulticastDNS": "is",
	"SetLinkDNSSEC":       "is",
	"RevertLink":          "i",
}

// loopback is a link every test process has, so the ifindex check passes.
func loopback(t *testing.T) (int32, string) {
	t.Helper()
	ifi, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatalf("no lo: %v", err)
	}
	return int32(ifi.Index), ifi.Name
}

func dial(t *testing.T, addr string) *Client {
	t.Helper()
	c, err := Dial(ctxT(t), addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// members lists the calls' members, after checking each one's signature.
func members(t *testing.T, calls []call) []string {
	t.Helper()
	var out []string
	for _, c := range calls {
		if want, ok := signatures[c.Member]; !ok || c.Signature != want {
			t.Errorf("%s called with signature %q, want %q", c.Member, c.Signature, want)
		}
		out = append(out, c.Member)
	}
	return out
}

func TestEnsure(t *testing.T) {
	addr := startBus(t)
	idx, name := loopback(t)
	v4 := netip.MustParseAddr("10.1.0.1")
	v6 := netip.MustParseAddr("fd00::53")
	wanted := func() *fakeLink {
		return &fakeLink{DNS: []dnsAddr{{syscall.AF_INET, []byte{10, 1, 0, 1}}}, Domains: []domain{{"prod.mesh", true}},
			LLMNR: "no", MulticastDNS: "no", DNSSEC: "no"}
	}
	for _, tc := range []struct {
		name   string
		start  func() *fakeLink
		server netip.Addr
		sets   []string  // the setters Ensure must call, in order
		end    *fakeLink // the link after Ensure
	}{
		{"set/fresh link: all six", defaultLink, v4,
			[]string{"SetLinkDNS", "SetLinkDomains", "SetLinkDefaultRoute", "SetLinkLLMNR", "SetLinkMulticastDNS", "SetLinkDNSSEC"}, wanted()},
		{"set/ipv6 server", defaultLink, v6,
			[]string{"SetLinkDNS", "SetLinkDomains", "SetLinkDefaultRoute", "SetLinkLLMNR", "SetLinkMulticastDNS", "SetLinkDNSSEC"},
			&fakeLink{DNS: []dnsAddr{{syscall.AF_INET6, v6.AsSlice()}}, Domains: []domain{{"prod.mesh", true}},
				LLMNR: "no", MulticastDNS: "no", DNSSEC: "no"}},
		{"set/only the server moved", func() *fakeLink {
			l := wanted()
			l.DNS = []dnsAddr{{syscall.AF_INET, []byte{10, 9, 9, 9}}}
			return l
		}, v4, []string{"SetLinkDNS"}, wanted()},
		{"set/a search domain is not a routing domain", func() *fakeLink {
			l := wanted()
			l.Domains = []domain{{"prod.mesh", false}}
			return l
		}, v4, []string{"SetLinkDomains"}, wanted()},
		{"set/an extra server goes", func() *fakeLink {
			l := wanted()
			l.DNS = append(l.DNS, dnsAddr{syscall.AF_INET, []byte{1, 1, 1, 1}})
			return l
		}, v4, []string{"SetLinkDNS"}, wanted()},
		{"set/DefaultRoute and DNSSEC only", func() *fakeLink {
			l := wanted()
			l.DefaultRoute, l.DNSSEC = true, "yes"
			return l
		}, v4, []string{"SetLinkDefaultRoute", "SetLinkDNSSEC"}, wanted()},
		{"same/nothing differs", wanted, v4, nil, wanted()},
		{"same/domain as resolved spells it", func() *fakeLink {
			l := wanted()
			l.Domains = []domain{{"Prod.Mesh.", true}}
			return l
		}, v4, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startFake(t, addr)
			f.addLink(idx, tc.start())
			c := dial(t, addr)
			l := Link{IfIndex: int(idx), IfName: name, Server: tc.server, Domain: "prod.mesh"}

			changed, err := c.Ensure(ctxT(t), l)
			if err != nil {
				t.Fatal(err)
			}
			calls := f.takeCalls()
			got := members(t, calls)
			want := append([]string{"GetLink", "GetAll"}, tc.sets...)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("calls %v, want %v", got, want)
			}
			if changed != (len(tc.sets) > 0) {
				t.Errorf("changed = %v with setters %v", changed, tc.sets)
			}
			for _, c := range calls[2:] {
				if c.Body[0] != idx {
					t.Errorf("%s on ifindex %v, want %d", c.Member, c.Body[0], idx)
				}
			}
			if tc.end != nil {
				if l := f.link(idx); !reflect.DeepEqual(l, tc.end) {
					t.Errorf("link after Ensure\n got %+v\nwant %+v", l, tc.end)
				}
			}

			// Again: it reads and sets nothing.
			changed, err = c.Ensure(ctxT(t), l)
			if err != nil {
				t.Fatal(err)
			}
			if got := members(t, f.takeCalls()); changed || !reflect.DeepEqual(got, []string{"GetLink", "GetAll"}) {
				t.Errorf("second Ensure: changed %v, calls %v; want false, [GetLink GetAll]", changed, got)
			}
		})
	}
}

func TestEnsurePackageLevelUsesSystemBusAddress(t *testing.T) {
	addr := startBus(t)
	idx, name := loopback(t)
	f := startFake(t, addr)
	f.addLink(idx, defaultLink())
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", addr)
	l := Link{IfIndex: int(idx), IfName: name, Server: netip.MustParseAddr("10.1.0.1"), Domain: "t.mesh"}
	if changed, err := Ensure(ctxT(t), l); err != nil || !changed {
		t.Fatalf("Ensure: changed %v, %v; want true, nil", changed, err)
	}
	f.takeCalls()
	if err := Revert(ctxT(t), int(idx)); err != nil {
		t.Fatal(err)
	}
	if got := members(t, f.takeCalls()); !reflect.DeepEqual(got, []string{"RevertLink"}) {
		t.Errorf("Revert called %v", got)
	}
}

func TestRevert(t *testing.T) {
	addr := startBus(t)
	idx, name := loopback(t)
	f := startFake(t, addr)
	f.addLink(idx, defaultLink())
	c := dial(t, addr)
	if _, err := c.Ensure(ctxT(t), Link{IfIndex: int(idx), IfName: name, Server: netip.MustParseAddr("10.1.0.1"), Domain: "prod.mesh"}); err != nil {
		t.Fatal(err)
	}
	f.takeCalls()

	if err := c.Revert(ctxT(t), int(idx)); err != nil {
		t.Fatal(err)
	}
	calls := f.takeCalls()
	if got := members(t, calls); !reflect.DeepEqual(got, []string{"RevertLink"}) || calls[0].Body[0] != idx {
		t.Fatalf("calls %v (%v), want RevertLink(%d)", got, calls, idx)
	}
	if l := f.link(idx); !reflect.DeepEqual(l, defaultLink()) {
		t.Errorf("link after Revert %+v, want the defaults", l)
	}

	t.Run("unknown link is not an error", func(t *testing.T) {
		if err := c.Revert(ctxT(t), 4242); err != nil {
			t.Fatalf("Revert of a link resolved does not know: %v", err)
		}
		if got := members(t, f.takeCalls()); !reflect.DeepEqual(got, []string{"RevertLink"}) {
			t.Errorf("calls %v, want [RevertLink]", got)
		}
	})
}

func TestErrors(t *testing.T) {
	addr := startBus(t)
	idx, name := loopback(t)
	l := Link{IfIndex: int(idx), IfName: name, Server: netip.MustParseAddr("10.1.0.1"), Domain: "prod.mesh"}

	t.Run("not running/no bus", func(t *testing.T) {
		_, err := Dial(ctxT(t), "unix:path=/nonexistent/meshd-test-bus")
		if !errors.Is(err, ErrNotRunning) {
			t.Fatalf("Dial to no bus: %v, want ErrNotRunning", err)
		}
		t.Log(err)
	})
	t.Run("not running/nobody owns resolve1", func(t *testing.T) {
		c := dial(t, addr)
		changed, err := c.Ensure(ctxT(t), l)
		if !errors.Is(err, ErrNotRunning) || changed {
			t.Fatalf("Ensure: changed %v, %v; want false, ErrNotRunning", changed, err)
		}
		var e *Error
		if !errors.As(err, &e) || e.Remedy == "" {
			t.Errorf("no *Error with a remedy: %#v", err)
		}
		t.Log(err)
		if err := c.Revert(ctxT(t), l.IfIndex); !errors.Is(err, ErrNotRunning) {
			t.Fatalf("Revert: %v, want ErrNotRunning", err)
		}
	})

	f := startFake(t, addr)
	c := dial(t, addr)
	t.Run("link unknown", func(t *testing.T) {
		changed, err := c.Ensure(ctxT(t), l)
		if !errors.Is(err, ErrLinkUnknown) || changed {
			t.Fatalf("Ensure: changed %v, %v; want false, ErrLinkUnknown", changed, err)
		}
		t.Log(err)
		f.takeCalls()
	})
	t.Run("access denied", func(t *testing.T) {
		f.addLink(idx, defaultLink())
		f.mu.Lock()
		f.deny = true
		f.mu.Unlock()
		changed, err := c.Ensure(ctxT(t), l)
		if !errors.Is(err, ErrAccessDenied) || changed {
			t.Fatalf("Ensure: changed %v, %v; want false, ErrAccessDenied", changed, err)
		}
		t.Log(err)
		if got := members(t, f.takeCalls()); !reflect.DeepEqual(got, []string{"GetLink", "GetAll", "SetLinkDNS"}) {
			t.Errorf("calls %v: Ensure must stop at the first refusal", got)
		}
	})
	t.Run("wrong link: ifindex is another interface here", func(t *testing.T) {
		bad := l
		bad.IfName = "nebula-not-lo"
		_, err := c.Ensure(ctxT(t), bad)
		if !errors.Is(err, ErrWrongLink) {
			t.Fatalf("Ensure: %v, want ErrWrongLink", err)
		}
		t.Log(err)
		if calls := f.takeCalls(); len(calls) != 0 {
			t.Errorf("resolved was called: %v", calls)
		}
	})
}

func TestValidate(t *testing.T) {
	good := Link{IfIndex: 3, IfName: "nebula1", Server: netip.MustParseAddr("10.1.0.1"), Domain: "prod.mesh"}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Link){
		"fail/ifindex 0":       func(l *Link) { l.IfIndex = 0 },
		"fail/no name":         func(l *Link) { l.IfName = "" },
		"fail/no server":       func(l *Link) { l.Server = netip.Addr{} },
		"fail/unspecified":     func(l *Link) { l.Server = netip.IPv4Unspecified() },
		"fail/zone":            func(l *Link) { l.Server = netip.MustParseAddr("fe80::1%eth0") },
		"fail/tilde":           func(l *Link) { l.Domain = "~prod.mesh" },
		"fail/final dot":       func(l *Link) { l.Domain = "prod.mesh." },
		"fail/empty domain":    func(l *Link) { l.Domain = "" },
		"fail/two domains":     func(l *Link) { l.Domain = "a.mesh b.mesh" },
		"fail/comma separated": func(l *Link) { l.Domain = "a.mesh,b.mesh" },
	} {
		l := good
		mod(&l)
		if err := l.Validate(); err == nil {
			t.Errorf("%s: %+v validated", name, l)
		}
	}
}
