package resolved

import (
	"fmt"
	"sync"
	"testing"

	"github.com/godbus/dbus/v5"
)

// call is one method call the fake received: its member, D-Bus signature
// and decoded body.
type call struct {
	Member    string
	Signature string
	Body      []any
}

// fakeLink is what the fake knows of one link.
type fakeLink struct {
	DNS          []dnsAddr
	Domains      []domain
	DefaultRoute bool
	LLMNR        string
	MulticastDNS string
	DNSSEC       string
}

// defaultLink is a link resolved has never been told about: every value
// differs from what Ensure wants.
func defaultLink() *fakeLink {
	return &fakeLink{DefaultRoute: true, LLMNR: "yes", MulticastDNS: "resolve", DNSSEC: "allow-downgrade"}
}

// fakeResolved is org.freedesktop.resolve1 on a test bus: the Manager's
// link methods and link objects with their properties. Setters called on
// it change its links, as resolved's would.
type fakeResolved struct {
	conn *dbus.Conn

	mu    sync.Mutex
	links map[int32]*fakeLink
	calls []call
	deny  bool // answer setters with AccessDenied
}

// startFake connects to the bus at addr and claims org.freedesktop.resolve1.
func startFake(t *testing.T, addr string) *fakeResolved {
	t.Helper()
	f, err := serveFake(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.conn.Close() })
	return f
}

func serveFake(addr string) (*fakeResolved, error) {
	f := &fakeResolved{links: map[int32]*fakeLink{}}
	conn, err := dbus.Connect(addr, dbus.WithIncomingInterceptor(f.record))
	if err != nil {
		return nil, err
	}
	f.conn = conn
	if err := conn.Export((*fakeManager)(f), managerPath, managerIface); err != nil {
		conn.Close()
		return nil, err
	}
	reply, err := conn.RequestName(resolvedName, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		conn.Close()
		return nil, fmt.Errorf("own %s: reply %v, %v", resolvedName, reply, err)
	}
	return f, nil
}

// record keeps each incoming method call, with the signature the caller
// put on the wire.
func (f *fakeResolved) record(m *dbus.Message) {
	if m.Type != dbus.TypeMethodCall {
		return
	}
	member, _ := m.Headers[dbus.FieldMember].Value().(string)
	var sig string
	if v, ok := m.Headers[dbus.FieldSignature]; ok {
		sig = v.Value().(dbus.Signature).String()
	}
	f.mu.Lock()
	f.calls = append(f.calls, call{Member: member, Signature: sig, Body: m.Body})
	f.mu.Unlock()
}

// addLink makes ifindex known, with its object exported.
func (f *fakeResolved) addLink(ifindex int32, l *fakeLink) {
	f.mu.Lock()
	f.links[ifindex] = l
	f.mu.Unlock()
	f.conn.Export(&fakeLinkObj{f: f, ifindex: ifindex}, linkPath(ifindex), "org.freedesktop.DBus.Properties")
}

// takeCalls returns the calls so far and forgets them.
func (f *fakeResolved) takeCalls() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.calls
	f.calls = nil
	return c
}

func (f *fakeResolved) link(ifindex int32) *fakeLink {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := *f.links[ifindex]
	return &l
}

func linkPath(ifindex int32) dbus.ObjectPath {
	return dbus.ObjectPath(fmt.Sprintf("/org/freedesktop/resolve1/link/_3%d", ifindex))
}

var errNoSuchLink = dbus.NewError(resolveNoSuchLink, []any{"Link not known"})

// fakeManager is the exported Manager interface of fakeResolved.
type fakeManager fakeResolved

// with runs set on the link under the lock, after the checks resolved makes.
func (m *fakeManager) with(ifindex int32, set func(*fakeLink)) *dbus.Error {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.links[ifindex]
	if !ok {
		return errNoSuchLink
	}
	if m.deny {
		return dbus.NewError(dbusAccessDenied, []any{"Access denied"})
	}
	set(l)
	return nil
}

func (m *fakeManager) GetLink(ifindex int32) (dbus.ObjectPath, *dbus.Error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.links[ifindex]; !ok {
		return "", errNoSuchLink
	}
	return linkPath(ifindex), nil
}

func (m *fakeManager) SetLinkDNS(ifindex int32, a []dnsAddr) *dbus.Error {
	return m.with(ifindex, func(l *fakeLink) { l.DNS = a })
}

func (m *fakeManager) SetLinkDomains(ifindex int32, d []domain) *dbus.Error {
	return m.with(ifindex, func(l *fakeLink) { l.Domains = d })
}

func (m *fakeManager) SetLinkDefaultRoute(ifindex int32, b bool) *dbus.Error {
	return m.with(ifindex, func(l *fakeLink) { l.DefaultRoute = b })
}

func (m *fakeManager) SetLinkLLMNR(ifindex int32, s string) *dbus.Error {
	return m.with(ifindex, func(l *fakeLink) { l.LLMNR = s })
}

func (m *fakeManager) SetLinkMulticastDNS(ifindex int32, s string) *dbus.Error {
	return m.with(ifindex, func(l *fakeLink) { l.MulticastDNS = s })
}

func (m *fakeManager) SetLinkDNSSEC(ifindex int32, s string) *dbus.Error {
	return m.with(ifindex, func(l *fakeLink) { l.DNSSEC = s })
}

func (m *fakeManager) RevertLink(ifindex int32) *dbus.Error {
	return m.with(ifindex, func(l *fakeLink) { *l = *defaultLink() })
}

// fakeLinkObj is a link object's org.freedesktop.DBus.Properties.
type fakeLinkObj struct {
	f       *fakeResolved
	ifindex int32
}

func (o *fakeLinkObj) GetAll(iface string) (map[string]dbus.Variant, *dbus.Error) {
	if iface != linkIface {
		return nil, dbus.NewError("org.freedesktop.DBus.Error.UnknownInterface", []any{iface})
	}
	o.f.mu.Lock()
	defer o.f.mu.Unlock()
	l, ok := o.f.links[o.ifindex]
	if !ok {
		return nil, errNoSuchLink
	}
	dns := l.DNS
	if dns == nil {
		dns = []dnsAddr{} // an empty a(iay), as resolved sends it
	}
	doms := l.Domains
	if doms == nil {
		doms = []domain{}
	}
	return map[string]dbus.Variant{
		"ScopesMask":   dbus.MakeVariant(uint64(1)),
		"DNS":          dbus.MakeVariant(dns),
		"Domains":      dbus.MakeVariant(doms),
		"DefaultRoute": dbus.MakeVariant(l.DefaultRoute),
		"LLMNR":        dbus.MakeVariant(l.LLMNR),
		"MulticastDNS": dbus.MakeVariant(l.MulticastDNS),
		"DNSOverTLS":   dbus.MakeVariant("no"),
		"DNSSEC":       dbus.MakeVariant(l.DNSSEC),
	}, nil
}
