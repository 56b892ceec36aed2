package nebulabundle

import (
	"bytes"
	"fmt"
	"net/netip"
	"path"
	"slices"

	"go.yaml.in/yaml/v3"
)

// The typed shape of config.yml. Only the keys a bundle sets are here;
// stock Nebula's defaults cover the rest. Field order is the order in the
// YAML, and yaml sorts map keys, so ConfigYAML is deterministic.
type stockConfig struct {
	PKI           stockPKI            `yaml:"pki"`
	StaticHostMap map[string][]string `yaml:"static_host_map"`
	Lighthouse    stockLighthouse     `yaml:"lighthouse"`
	Listen        stockListen         `yaml:"listen"`
	Punchy        stockPunchy         `yaml:"punchy"`
	Relay         stockRelay          `yaml:"relay"`
	Tun           *stockTun           `yaml:"tun,omitempty"`
	Logging       stockLogging        `yaml:"logging"`
	Firewall      stockFirewall       `yaml:"firewall"`
}

type stockPKI struct {
	CA   string `yaml:"ca"`
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
}

type stockLighthouse struct {
	AmLighthouse bool     `yaml:"am_lighthouse"`
	Hosts        []string `yaml:"hosts"`
}

type stockListen struct {
	Host string `yaml:"host"`
	Port int    `yaml:"port"`
}

type stockPunchy struct {
	Punch   bool `yaml:"punch"`
	Respond bool `yaml:"respond"`
}

type stockRelay struct {
	Relays    []string `yaml:"relays"`
	AmRelay   bool     `yaml:"am_relay"`
	UseRelays bool     `yaml:"use_relays"`
}

type stockTun struct {
	MTU int `yaml:"mtu"`
}

type stockLogging struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}

type stockFirewall struct {
	Outbound []Rule `yaml:"outbound"`
	Inbound  []Rule `yaml:"inbound"`
}

// ConfigYAML returns config.yml for stock Nebula (v1.12.0, the version
// meshd embeds), after Validate.
// The same Bundle always renders the same text. It names the key file but
// never holds a key or certificate: the pki entries are file paths.
func (b Bundle) ConfigYAML() ([]byte, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	file := func(name string) string {
		if b.PKIDir == "" {
			return name
		}
		return path.Join(b.PKIDir, name)
	}
	hosts := []string{}
	for _, ip := range b.lighthouseIPs() {
		hosts = append(hosts, ip.String())
	}
	static := map[string][]string{}
	for ip, addrs := range b.staticHostMap() {
		for _, a := range addrs {
			static[ip.String()] = append(static[ip.String()], a.String())
		}
	}
	relays := []string{}
	rs := slices.Clone(b.Relays)
	slices.SortFunc(rs, netip.Addr.Compare)
	for _, r := range slices.Compact(rs) {
		relays = append(relays, r.String())
	}
	var tun *stockTun
	if b.MTU != 0 {
		tun = &stockTun{MTU: b.MTU}
	}
	fw := stockFirewall{Outbound: b.Outbound, Inbound: b.Inbound}
	if fw.Outbound == nil {
		fw.Outbound = AnyOut()
	}
	if fw.Inbound == nil {
		fw.Inbound = []Rule{} // an empty list, never a missing key: drop everything
	}
	sc := stockConfig{
		PKI:           stockPKI{CA: file(CAFile), Cert: file(CertFile), Key: file(KeyFile)},
		StaticHostMap: static,
		Lighthouse:    stockLighthouse{AmLighthouse: false, Hosts: hosts},
		// "::" is both families; v1.11.0's and v1.12.0's examples write it
		// so ("[::]" is older guidance they still accept).
		Listen:   stockListen{Host: "::", Port: b.ListenPort},
		Punchy:   stockPunchy{Punch: true, Respond: true},
		Relay:    stockRelay{Relays: relays, AmRelay: false, UseRelays: true},
		Tun:      tun,
		Logging:  stockLogging{Level: "info", Format: "text"},
		Firewall: fw,
	}
	var buf bytes.Buffer
	buf.WriteString("# Nebula v1.11.0 config written by meshd (nebulabundle). The pki paths\n" +
		"# are read relative to Nebula's working directory unless absolute.\n")
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(sc); err != nil {
		return nil, fmt.Errorf("render Nebula bundle config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("render Nebula bundle config: %w", err)
	}
	return buf.Bytes(), nil
}

// lighthouseIPs returns the lighthouses' IPv4 overlay addresses, sorted.
func (b Bundle) lighthouseIPs() []netip.Addr {
	out := make([]netip.Addr, 0, len(b.Lighthouses))
	for _, lh := range b.Lighthouses {
		out = append(out, lh.Overlay)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// staticHostMap merges the lighthouses (both overlay addresses) and the
// static hosts into static_host_map: overlay address to sorted,
// de-duplicated underlay addresses, IPv4-mapped ones unmapped.
func (b Bundle) staticHostMap() map[netip.Addr][]netip.AddrPort {
	out := map[netip.Addr][]netip.AddrPort{}
	add := func(ip netip.Addr, addrs []netip.AddrPort) {
		for _, a := range addrs {
			out[ip] = append(out[ip], netip.AddrPortFrom(a.Addr().Unmap(), a.Port()))
		}
	}
	for _, lh := range b.Lighthouses {
		add(lh.Overlay, lh.Underlay)
		if lh.Overlay6.IsValid() {
			add(lh.Overlay6, lh.Underlay)
		}
	}
	for ip, addrs := range b.StaticHosts {
		add(ip, addrs)
	}
	for ip, addrs := range out {
		slices.SortFunc(addrs, netip.AddrPort.Compare)
		out[ip] = slices.Compact(addrs)
	}
	return out
}
