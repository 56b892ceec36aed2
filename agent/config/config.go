package config

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/mesh"
)

// File is /etc/meshd/meshd.yaml. Unknown keys are refused with the
// field named; Validate runs before anything starts or is written.
type File struct {
	StateDir      string `yaml:"state_dir"`
	Socket        string `yaml:"socket"`
	SocketGroup   string `yaml:"socket_group"`
	BindAddr      string `yaml:"bind_addr"`      // listeners bind here; default all addresses
	AdvertiseAddr string `yaml:"advertise_addr"` // underlay IP; default: the route's source address (mesh.ChooseUnderlay)
	// AdvertiseIface pins the underlay to this interface's address; with
	// advertise_addr too, that address must be on this interface.
	AdvertiseIface string     `yaml:"advertise_iface"`
	NodeName       string     `yaml:"node_name"`    // name used by init; default the hostname
	OverlayCIDR    string     `yaml:"overlay_cidr"` // used by init
	LogLevel       string     `yaml:"log_level"`    // debug, info, warn, error
	LogFormat      string     `yaml:"log_format"`   // text or json
	Ports          Ports      `yaml:"ports"`
	Raft           RaftTiming `yaml:"raft"`

	OverlayMode OverlayMode `yaml:"overlay_mode"` // kernel (a TUN device) or userspace (no privileges)
	TunDevice   string      `yaml:"tun_device"`   // kernel TUN device name
	// OverlayMTU is the TUN device's MTU (kernel mode): 576-8937, default
	// 1300, Nebula's 60 bytes inside the underlay's MTU; reload applies it.
	OverlayMTU int `yaml:"overlay_mtu"`
	// OverlayRoutines is Nebula's routines, the reader/writer pairs on the
	// TUN device and the UDP socket: 1-64, default 1; next start.
	OverlayRoutines int `yaml:"overlay_routines"`
	// OverlayOffloads asks Nebula for TUN TSO/USO and UDP GRO/GSO (a
	// refused one: a warning, no failed start); default true; next start.
	OverlayOffloads bool `yaml:"overlay_offloads"`
	// Relay offers this node as a Nebula relay (DESIGN §11) to peers that
	// cannot reach each other directly. It is recorded in raft on the
	// node's record (at the join, and by the node itself when it starts
	// with another setting) and every node lists it among its relays.
	// Worth it only on a node others reach: a public address or a
	// forwarded UDP port. Control nodes relay anyway. Default false; a
	// change takes effect at the next start (Nebula reads am_relay once).
	Relay  bool         `yaml:"relay"`
	Timers TimerProfile `yaml:"timers"` // lan (memberlist's LAN defaults) or fast (short probe/gossip intervals)
	// GossipPool, false (the default) on a worker, keeps it out of the
	// gossip pool: no memberlist or serf runs, it reads the others'
	// liveness from its node list and the control nodes judge it by its
	// record (issue 54 item 3, step iv). true opts a worker
	// into the pool. A control node is always in the pool, whatever it
	// says (member.inPool). Next start.
	GossipPool        bool          `yaml:"gossip_pool"`
	ReconcileInterval time.Duration `yaml:"reconcile_interval"` // the safety-net tick of the overlay reconcile loop
	// NebulaCertLifetime is how long the Nebula host certs the CA holder
	// signs are valid; they are renewed at 2/3 of it.
	NebulaCertLifetime time.Duration `yaml:"nebula_cert_lifetime"`
	// TLSLifetime is how long the TLS leaves the CA holder signs (at
	// admission and renewal) are valid; they are renewed at 2/3 of it.
	TLSLifetime time.Duration `yaml:"tls_lifetime"`
	// RevocationAckTimeout bounds how long `meshctl remove` waits for
	// every live member to acknowledge the revocation.
	RevocationAckTimeout time.Duration `yaml:"revocation_ack_timeout"`
	// TokenRetention is how long used, expired and revoked join-token
	// records stay in raft before the leader prunes them.
	TokenRetention time.Duration `yaml:"token_retention"`
	// EphemeralAfter is how long gossip must have seen an ephemeral node
	// failed or left before the raft leader removes it, as `meshctl
	// remove` does, and forgets its record, freeing its name and overlay
	// IP (issue 31; control.MinEphemeralAfter to MaxEphemeralAfter, 10s
	// to 24h, default 1m). Control nodes read it; a change takes effect
	// at the next start.
	EphemeralAfter time.Duration `yaml:"ephemeral_after"`
	// FormerRetention is how long `meshctl nodes` and the console show a
	// former node (issue 52; 0-8760h, default 24h; display only: `nodes
	// --all` shows every record, `meshctl forget NAME` drops one).
	FormerRetention time.Duration `yaml:"former_retention"`
	// MetricsAddr, when set, serves Prometheus text at /metrics on this
	// host:port: a loopback IP, or this node's overlay IP (kernel overlay
	// mode; anything else is refused with codes.MetricsAddrRefused).
	// Opt-in; off by default.
	MetricsAddr string `yaml:"metrics_addr"`
	// MaxClockSkew is how far two clocks may differ at a join: a joiner
	// whose clock differs from the seed's by more is refused with
	// ClockSkew before it sends the token's secret, and a control node
	// refuses an enroll request whose claimed time is further off. Past
	// 30 s the join goes on with a warning. 5s-1h, default 5m.
	MaxClockSkew time.Duration `yaml:"max_clock_skew"`
	// Firewall is the overlay firewall (firewall.go); reloadable.
	Firewall Firewall `yaml:"firewall"`
	// DNS is the cluster's names (dns.go).
	DNS DNS `yaml:"dns"`
	// JWT is the joins by identity a control node admits (jwt.go).
	JWT JWT `yaml:"jwt"`
}

// Ports are the TCP/UDP ports meshd listens on (DESIGN §3).
type Ports struct {
	Gossip  int `yaml:"gossip"`
	Control int `yaml:"control"`
	Raft    int `yaml:"raft"`
	Nebula  int `yaml:"nebula"`
	// STUN is the UDP port control nodes answer STUN Binding requests on
	// (netcheck: `meshctl netcheck`, join --plan and join), on the bind
	// address. Workers serve nothing there; they send to control nodes
	// on this port, so it is one value across a cluster (default 3478,
	// STUN's IANA port).
	STUN int `yaml:"stun"`
}

// RaftTiming tunes raft's timers. The defaults suit real networks; tests on
// loopback shorten them.
type RaftTiming struct {
	HeartbeatTimeout time.Duration `yaml:"heartbeat_timeout"`
	ElectionTimeout  time.Duration `yaml:"election_timeout"`
	LeaderLease      time.Duration `yaml:"leader_lease"`
	// PromoteTimeout bounds how long the leader waits for a joining control
	// node to catch up before it removes it again instead of promoting it.
	PromoteTimeout time.Duration `yaml:"promote_timeout"`
}

// OverlayMode is how Nebula reaches the host: a kernel TUN device, or a
// userspace network stack (no privileges; tests).
type OverlayMode string

const (
	OverlayKernel    OverlayMode = "kernel"
	OverlayUserspace OverlayMode = "userspace"
)

// TimerProfile selects gossip's and Nebula's timers.
type TimerProfile string

const (
	TimersLAN  TimerProfile = "lan"  // memberlist's LAN defaults
	TimersFast TimerProfile = "fast" // short probe and gossip intervals (tests, fast failure detection)
)

// Default is what an empty config file means.
func Default() File {
	return File{
		StateDir:    "/var/lib/meshd",
		Socket:      "/run/meshd/meshd.sock",
		SocketGroup: "meshd",
		BindAddr:    "0.0.0.0",
		OverlayCIDR: "10.42.0.0/16",
		LogLevel:    "info",
		LogFormat:   "text",
		Ports:       Ports{Gossip: 7946, Control: 7300, Raft: 7301, Nebula: 4242, STUN: 3478},
		Raft: RaftTiming{HeartbeatTimeout: time.Second, ElectionTimeout: time.Second, LeaderLease: 500 * time.Millisecond,
			PromoteTimeout: 20 * time.Second},

		OverlayMode:       OverlayKernel,
		TunDevice:         "meshd0",
		OverlayMTU:        mesh.DefaultMTU,
		OverlayRoutines:   mesh.DefaultRoutines,
		OverlayOffloads:   true,
		Firewall:          DefaultFirewall(),
		Timers:            TimersLAN,
		GossipPool:        false, // workers out of the pool (issue 54); control nodes are in it regardless
		ReconcileInterval: 30 * time.Second,

		NebulaCertLifetime:   365 * 24 * time.Hour,
		TLSLifetime:          30 * 24 * time.Hour,
		RevocationAckTimeout: control.DefaultRevocationAckTimeout,
		TokenRetention:       control.DefaultTokenRetention,
		EphemeralAfter:       control.DefaultEphemeralAfter,
		FormerRetention:      24 * time.Hour,
		MaxClockSkew:         enroll.DefaultMaxSkew,
		DNS:                  DefaultDNS(),
	}
}

// Error is one problem of a config: the field (its key path, e.g.
// raft.heartbeat_timeout), the bad value, and Err, what is allowed. Line
// is the YAML line it came from; 0 when it did not come from the file
// (Source says "default" or "flag" then, or nothing for a whole-file
// problem). Hint is a known key an unknown one probably meant.
type Error struct {
	Field  string
	Value  string
	Err    error
	Line   int
	Source string
	Hint   string
}

// Error is one line: `line 4: raft.heartbeat_timeout = "1": a duration
// needs a unit, e.g. 1s (ns, us, ms, s, m, h)`.
func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	case e.Source != "":
		fmt.Fprintf(&b, "(%s) ", e.Source)
	}
	switch {
	case e.Field != "" && e.Value != "":
		fmt.Fprintf(&b, "%s = %q: ", e.Field, e.Value)
	case e.Field != "":
		fmt.Fprintf(&b, "%s: ", e.Field)
	}
	fmt.Fprint(&b, e.Err)
	if e.Hint != "" {
		fmt.Fprintf(&b, "; did you mean %s?", e.Hint)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Load reads path over Default. A missing file at path is
// only an error if mustExist; meshd runs on defaults otherwise. Every
// problem of the file (syntax, unknown keys, wrong types) is returned at
// once as a coded *Errors; the values are not validated
// (Check does both).
func Load(path string, mustExist bool) (File, error) {
	cfg, _, err := loadConfig(path, mustExist)
	return cfg, err
}

// Validate checks every field and returns every problem at once, coded
// ConfigInvalid: a *Errors, each of its *Error naming a field
// (errors.As finds the first). A check that compares two fields is left
// out when either already failed on its own (configcheck.go).
func (c File) Validate() error {
	var probs Errors
	bad := probs.add
	failed := probs.failed
	if c.StateDir == "" || !filepath.IsAbs(c.StateDir) {
		bad("state_dir", c.StateDir, errors.New("must be an absolute path"))
	}
	if c.Socket == "" || !filepath.IsAbs(c.Socket) {
		bad("socket", c.Socket, errors.New("must be an absolute path"))
	}
	if len(c.Socket) >= 100 {
		bad("socket", c.Socket, errors.New("unix socket paths must be shorter than 100 bytes"))
	}
	if _, err := netip.ParseAddr(c.BindAddr); err != nil {
		bad("bind_addr", c.BindAddr, errors.New("must be an IP address"))
	}
	if c.AdvertiseAddr != "" {
		if _, err := netip.ParseAddr(c.AdvertiseAddr); err != nil {
			bad("advertise_addr", c.AdvertiseAddr, errors.New("must be an IP address"))
		}
	}
	if c.AdvertiseIface != "" && (len(c.AdvertiseIface) > 15 || strings.ContainsAny(c.AdvertiseIface, "/ \t\n")) {
		bad("advertise_iface", c.AdvertiseIface, errors.New("must be an interface name (1-15 characters, no '/' or space)"))
	}
	if _, err := ParseOverlayCIDR(c.OverlayCIDR); err != nil {
		bad("overlay_cidr", c.OverlayCIDR, err)
	}
	if _, err := ParseLevel(c.LogLevel); err != nil {
		bad("log_level", c.LogLevel, errors.New("must be debug, info, warn or error"))
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		bad("log_format", c.LogFormat, errors.New("must be text or json"))
	}
	for _, pt := range []struct {
		name string
		v    int
	}{{"ports.gossip", c.Ports.Gossip}, {"ports.control", c.Ports.Control}, {"ports.raft", c.Ports.Raft}, {"ports.nebula", c.Ports.Nebula}, {"ports.stun", c.Ports.STUN}} {
		if pt.v < 1 || pt.v > 65535 {
			bad(pt.name, fmt.Sprint(pt.v), errors.New("must be a port between 1 and 65535"))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"raft.heartbeat_timeout", c.Raft.HeartbeatTimeout}, {"raft.election_timeout", c.Raft.ElectionTimeout}, {"raft.leader_lease", c.Raft.LeaderLease}} {
		if d.v < 5*time.Millisecond || d.v > time.Minute {
			bad(d.name, d.v.String(), errors.New("must be between 5ms and 1m"))
		}
	}
	if c.OverlayMode != OverlayKernel && c.OverlayMode != OverlayUserspace {
		bad("overlay_mode", string(c.OverlayMode), errors.New("must be kernel or userspace"))
	}
	if c.TunDevice == "" || len(c.TunDevice) > 15 {
		bad("tun_device", c.TunDevice, errors.New("must be 1-15 characters"))
	}
	if c.OverlayMTU < 576 || c.OverlayMTU > mesh.MaxMTU {
		bad("overlay_mtu", fmt.Sprint(c.OverlayMTU), fmt.Errorf("must be between 576 and %d (Nebula's largest)", mesh.MaxMTU))
	}
	if c.OverlayRoutines < 1 || c.OverlayRoutines > mesh.MaxRoutines {
		bad("overlay_routines", fmt.Sprint(c.OverlayRoutines), fmt.Errorf("must be between 1 and %d", mesh.MaxRoutines))
	}
	if c.Timers != TimersLAN && c.Timers != TimersFast {
		bad("timers", string(c.Timers), errors.New("must be lan or fast"))
	}
	if c.ReconcileInterval < 100*time.Millisecond || c.ReconcileInterval > time.Hour {
		bad("reconcile_interval", c.ReconcileInterval.String(), errors.New("must be between 100ms and 1h"))
	}
	if c.MetricsAddr != "" {
		if err := c.validMetricsAddr(); err != nil { // metrics.go
			bad("metrics_addr", c.MetricsAddr, err)
		}
	}
	if c.NebulaCertLifetime < 5*time.Second || c.NebulaCertLifetime > 10*365*24*time.Hour {
		bad("nebula_cert_lifetime", c.NebulaCertLifetime.String(), errors.New("must be between 5s and 10 years"))
	}
	if c.TLSLifetime < 5*time.Second || c.TLSLifetime > 365*24*time.Hour {
		bad("tls_lifetime", c.TLSLifetime.String(), errors.New("must be between 5s and 8760h (a year)"))
	}
	if c.RevocationAckTimeout < 100*time.Millisecond || c.RevocationAckTimeout > time.Minute {
		bad("revocation_ack_timeout", c.RevocationAckTimeout.String(), errors.New("must be between 100ms and 1m"))
	}
	if c.TokenRetention < time.Minute || c.TokenRetention > 365*24*time.Hour {
		bad("token_retention", c.TokenRetention.String(), errors.New("must be between 1m and 8760h (a year)"))
	}
	if c.EphemeralAfter < control.MinEphemeralAfter || c.EphemeralAfter > control.MaxEphemeralAfter {
		bad("ephemeral_after", c.EphemeralAfter.String(), errors.New("must be between 10s and 24h"))
	}
	if c.FormerRetention < 0 || c.FormerRetention > 365*24*time.Hour {
		bad("former_retention", c.FormerRetention.String(), errors.New("must be between 0s and 8760h (a year)"))
	}
	if c.MaxClockSkew < 5*time.Second || c.MaxClockSkew > time.Hour {
		bad("max_clock_skew", c.MaxClockSkew.String(), errors.New("must be between 5s and 1h"))
	}
	if c.Raft.PromoteTimeout < time.Second || c.Raft.PromoteTimeout > 10*time.Minute {
		bad("raft.promote_timeout", c.Raft.PromoteTimeout.String(), errors.New("must be between 1s and 10m"))
	}
	if c.Raft.ElectionTimeout < c.Raft.HeartbeatTimeout && !failed("raft.election_timeout", "raft.heartbeat_timeout") {
		bad("raft.election_timeout", c.Raft.ElectionTimeout.String(), errors.New("must not be shorter than raft.heartbeat_timeout"))
	}
	tcp := map[int]string{}
	for _, pt := range []struct {
		name string
		v    int
	}{{"ports.gossip", c.Ports.Gossip}, {"ports.control", c.Ports.Control}, {"ports.raft", c.Ports.Raft}} {
		if other, dup := tcp[pt.v]; dup && !failed(pt.name, other) {
			bad(pt.name, fmt.Sprint(pt.v), fmt.Errorf("must differ from %s (both are TCP listeners)", other))
		}
		tcp[pt.v] = pt.name
	}
	if c.Ports.Nebula == c.Ports.Gossip && !failed("ports.nebula", "ports.gossip") {
		bad("ports.nebula", fmt.Sprint(c.Ports.Nebula), errors.New("must differ from ports.gossip (both are UDP listeners)"))
	}
	for _, other := range []struct {
		name string
		v    int
	}{{"ports.gossip", c.Ports.Gossip}, {"ports.nebula", c.Ports.Nebula}} {
		if c.Ports.STUN == other.v && !failed("ports.stun", other.name) {
			bad("ports.stun", fmt.Sprint(c.Ports.STUN), fmt.Errorf("must differ from %s (both are UDP listeners)", other.name))
		}
	}
	c.validDNS(bad)
	c.validJWT(bad)
	if err := c.Firewall.validate(); err != nil {
		// One problem, the first bad rule, under its direction's
		// list key (which has a line in the file); the code says which
		// check refused it.
		field := "firewall"
		if fe, ok := errors.AsType[*mesh.FirewallError](err); ok {
			field += "." + strings.SplitN(fe.Field, "[", 2)[0]
		}
		bad(field, "", fmt.Errorf("%w (%s)", err, codes.Of(err)))
	}
	if c.Raft.LeaderLease > c.Raft.HeartbeatTimeout && !failed("raft.leader_lease", "raft.heartbeat_timeout") {
		bad("raft.leader_lease", c.Raft.LeaderLease.String(), errors.New("must not exceed raft.heartbeat_timeout"))
	}
	return probs.err()
}

// ParseOverlayCIDR parses an IPv4 overlay (overlay_cidr, `init
// --overlay-cidr`): an IPv4 network between /8 and /28, no host bits.
func ParseOverlayCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() || p.Bits() > 28 || p.Bits() < 8 || p.Masked() != p {
		return netip.Prefix{}, errors.New("must be an IPv4 network between /8 and /28, e.g. 10.42.0.0/16")
	}
	return p, nil
}
