package nebulabundle

import (
	"bytes"
	"encoding/pem"
	"errors"
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Bundle is everything a stock Nebula member needs. It is data: the
// caller fills it, Validate checks it, ConfigYAML and WriteDir render it.
type Bundle struct {
	// CACerts is the CA bundle in PEM: one Nebula CA certificate, or two
	// while the cluster's CA rotates (pki.CA.NebulaCertPEM, the CA bundle a
	// member follows).
	CACerts []byte
	// Cert is the member's host certificate in PEM (v1, or v2 on a
	// dual-stack cluster).
	Cert []byte
	// Key is the member's private key in PEM, as GenerateKey writes it;
	// nil when the device made its own and keeps it.
	Key []byte

	// PKIDir is where the device will keep the three files; pki.ca,
	// pki.cert and pki.key name PKIDir/ca.crt and so on. Empty: the bare
	// names, which Nebula resolves against its working directory.
	PKIDir string

	// Lighthouses are the cluster's lighthouses: lighthouse.hosts and
	// static_host_map entries.
	Lighthouses []Host
	// StaticHosts are further static_host_map entries: overlay address
	// (either family) to underlay addresses.
	StaticHosts map[netip.Addr][]netip.AddrPort
	// Relays are the overlay addresses of the relays this member may be
	// reached through (relay.relays).
	Relays []netip.Addr

	// Inbound and Outbound are the overlay firewall. Nil Outbound renders
	// as any/any; nil Inbound as an empty list, which drops everything
	// that is not a reply.
	Inbound  []Rule
	Outbound []Rule

	// ListenPort is listen.port; 0 lets the kernel choose (a roaming
	// device behind NAT needs no fixed port).
	ListenPort int
	// MTU is tun.mtu; 0 leaves Nebula's default (1300).
	MTU int
}

// Host is a lighthouse: its overlay addresses and where it listens.
type Host struct {
	Overlay  netip.Addr // IPv4 overlay address: lighthouse.hosts
	Overlay6 netip.Addr // IPv6 overlay address on a dual-stack cluster; zero otherwise
	Underlay []netip.AddrPort
}

// Rule is one overlay firewall rule with Nebula's keys. Its fields are
// mesh.FirewallRule's, in the same order with the same types, so either
// converts to the other (nebulabundle.Rule(r)) without this package
// importing mesh, and so Nebula. A rule matches port AND proto AND (host
// OR group/groups OR cidr) AND local_cidr.
type Rule struct {
	Port      string   `yaml:"port" json:"port"`                                 // "any", "443" or "8000-8100"
	Proto     string   `yaml:"proto" json:"proto"`                               // any, tcp, udp or icmp
	Host      string   `yaml:"host,omitempty" json:"host,omitempty"`             // "any" or a certificate name
	Group     string   `yaml:"group,omitempty" json:"group,omitempty"`           // one group
	Groups    []string `yaml:"groups,omitempty" json:"groups,omitempty"`         // all of these groups
	CIDR      string   `yaml:"cidr,omitempty" json:"cidr,omitempty"`             // the peer's overlay address
	LocalCIDR string   `yaml:"local_cidr,omitempty" json:"local_cidr,omitempty"` // this end's address
}

// AnyOut is the outbound firewall a nil Bundle.Outbound renders as.
func AnyOut() []Rule { return []Rule{{Port: "any", Proto: "any", Host: "any"}} }

// The file names of a bundle directory.
const (
	CAFile     = "ca.crt"
	CertFile   = "host.crt"
	KeyFile    = "host.key"
	ConfigFile = "config.yml"
)

// MaxMTU is the largest tun.mtu stock Nebula v1.12 takes as it is
// (overlay/tun.go: a larger one is capped with a log line; v1.11 took up
// to 9001). TestMaxMTUIsMeshs checks it against mesh.MaxMTU.
const MaxMTU = 8937

// PEM block types Nebula v1.11.0 and v1.12.0 read (cert/pem.go).
var (
	certBlocks = []string{"NEBULA CERTIFICATE", "NEBULA CERTIFICATE V2"}
	keyBlocks  = []string{"NEBULA X25519 PRIVATE KEY", "NEBULA P256 PRIVATE KEY"}
)

// FieldError names the field of a Bundle that is wrong ("lighthouses[1].underlay")
// and why. Value is never a key or certificate.
type FieldError struct {
	Field string
	Value string
	Err   error
}

func (e *FieldError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("nebula bundle: %s: %v", e.Field, e.Err)
	}
	return fmt.Sprintf("nebula bundle: %s %q: %v", e.Field, e.Value, e.Err)
}

func (e *FieldError) Unwrap() error { return e.Err }

// Validate checks b as stock Nebula (v1.12.0, the version meshd embeds)
// would read it, and more strictly; the first problem is a *FieldError.
func (b Bundle) Validate() error {
	bad := func(field, value, format string, a ...any) error {
		return &FieldError{Field: field, Value: value, Err: fmt.Errorf(format, a...)}
	}
	if err := checkPEM("ca_certs", b.CACerts, certBlocks, true); err != nil {
		return err
	}
	if err := checkPEM("cert", b.Cert, certBlocks, false); err != nil {
		return err
	}
	if b.Key != nil {
		if err := checkPEM("key", b.Key, keyBlocks, false); err != nil {
			return err
		}
	}
	if b.PKIDir != "" && !path.IsAbs(b.PKIDir) {
		return bad("pki_dir", b.PKIDir, "want an absolute path: Nebula resolves a relative one against its working directory")
	}
	if len(b.Lighthouses) == 0 {
		return bad("lighthouses", "", "want at least one: a member without a lighthouse finds no peer")
	}
	seen := map[netip.Addr]bool{}
	for i, lh := range b.Lighthouses {
		f := fmt.Sprintf("lighthouses[%d]", i)
		if !lh.Overlay.Is4() {
			return bad(f+".overlay", lh.Overlay.String(), "want an IPv4 overlay address")
		}
		if seen[lh.Overlay] {
			return bad(f+".overlay", lh.Overlay.String(), "listed twice")
		}
		seen[lh.Overlay] = true
		if lh.Overlay6.IsValid() && (!lh.Overlay6.Is6() || lh.Overlay6.Is4In6()) {
			return bad(f+".overlay6", lh.Overlay6.String(), "want an IPv6 overlay address")
		}
		if len(lh.Underlay) == 0 {
			return bad(f+".underlay", "", "want at least one underlay address")
		}
		if err := checkUnderlay(f+".underlay", lh.Underlay); err != nil {
			return err
		}
	}
	for _, ip := range sortedAddrs(b.StaticHosts) {
		f := "static_hosts[" + ip.String() + "]"
		if !ip.IsValid() || ip.Is4In6() {
			return bad("static_hosts", ip.String(), "want an IPv4 or IPv6 overlay address")
		}
		if err := checkUnderlay(f, b.StaticHosts[ip]); err != nil {
			return err
		}
	}
	for i, r := range b.Relays {
		if !r.IsValid() || r.Is4In6() {
			return bad(fmt.Sprintf("relays[%d]", i), r.String(), "want an overlay address")
		}
	}
	for _, d := range []struct {
		name  string
		rules []Rule
	}{{"inbound", b.Inbound}, {"outbound", b.Outbound}} {
		for i, r := range d.rules {
			if field, value, err := checkRule(r); err != nil {
				return &FieldError{Field: fmt.Sprintf("firewall.%s[%d].%s", d.name, i, field), Value: value, Err: err}
			}
		}
	}
	if b.ListenPort < 0 || b.ListenPort > 65535 {
		return bad("listen_port", strconv.Itoa(b.ListenPort), "out of range 0-65535")
	}
	if b.MTU != 0 && (b.MTU < 576 || b.MTU > MaxMTU) {
		return bad("mtu", strconv.Itoa(b.MTU), "out of range 576-%d (0: Nebula's default)", MaxMTU)
	}
	return nil
}

// checkPEM checks raw holds only PEM blocks of the given types: one, or
// (many) at least one. It reports block types and counts, never content.
func checkPEM(field string, raw []byte, types []string, many bool) error {
	n := 0
	rest := raw
	for {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if !slices.Contains(types, blk.Type) {
			return &FieldError{Field: field, Value: blk.Type, Err: fmt.Errorf("want a PEM block of type %s", strings.Join(types, " or "))}
		}
		n++
	}
	switch {
	case n == 0:
		return &FieldError{Field: field, Err: errors.New("no PEM block")}
	case len(bytes.TrimSpace(rest)) > 0:
		return &FieldError{Field: field, Err: errors.New("text after the last PEM block")}
	case n > 1 && !many:
		return &FieldError{Field: field, Err: fmt.Errorf("%d PEM blocks; want one", n)}
	}
	return nil
}

func checkUnderlay(field string, addrs []netip.AddrPort) error {
	for i, a := range addrs {
		if !a.IsValid() || a.Port() == 0 || a.Addr().IsUnspecified() {
			return &FieldError{Field: fmt.Sprintf("%s[%d]", field, i), Value: a.String(), Err: errors.New("want a host address and a port")}
		}
	}
	return nil
}

// checkRule is the shape Nebula's firewall parser needs; meshd's own
// rules come checked by mesh.CheckFirewall already.
func checkRule(r Rule) (field, value string, err error) {
	switch r.Proto {
	case "any", "tcp", "udp", "icmp":
	default:
		return "proto", r.Proto, errors.New("want any, tcp, udp or icmp")
	}
	if err := checkPort(r.Port); err != nil {
		return "port", r.Port, err
	}
	if r.Host == "" && r.Group == "" && len(r.Groups) == 0 && r.CIDR == "" {
		return "host", "", errors.New("a rule needs at least one of host, group, groups or cidr")
	}
	if r.Group != "" && len(r.Groups) > 0 {
		return "group", r.Group, errors.New("give group or groups, not both")
	}
	for _, c := range []struct{ field, v string }{{"cidr", r.CIDR}, {"local_cidr", r.LocalCIDR}} {
		if c.v == "" || c.v == "any" {
			continue
		}
		if _, err := netip.ParsePrefix(c.v); err != nil {
			return c.field, c.v, errors.New("want a prefix such as 10.42.0.0/24, or any")
		}
	}
	return "", "", nil
}

func checkPort(p string) error {
	if p == "any" {
		return nil
	}
	lo, hi, isRange := strings.Cut(p, "-")
	a, err1 := strconv.Atoi(lo)
	b, err2 := a, error(nil)
	if isRange {
		b, err2 = strconv.Atoi(hi)
	}
	if err1 != nil || err2 != nil || a < 1 || b > 65535 || a > b {
		return errors.New(`want "any", a port 1-65535 or a range such as 8000-8100`)
	}
	return nil
}

// sortedAddrs returns m's keys in order.
func sortedAddrs[V any](m map[netip.Addr]V) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for ip := range m {
		out = append(out, ip)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}
