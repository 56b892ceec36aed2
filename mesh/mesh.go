package mesh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/slackhq/nebula"
	"github.com/slackhq/nebula/config"
	"github.com/slackhq/nebula/overlay"

	"github.com/meshd/meshd/codes"
)

// releaseTimeout bounds how long a kernel-mode Stop waits for the TUN
// device and the UDP port to be released.
const releaseTimeout = 3 * time.Second

// Mesh is one running Nebula instance. Its methods are safe for concurrent
// use. Production runs one per process; tests may run several userspace
// instances in one process.
type Mesh struct {
	log    *slog.Logger
	bridge *logBridge
	nc     *config.C
	ctrl   *nebula.Control
	stack  *netstack    // userspace mode only
	self   netip.Addr   // own overlay address: first network of the certificate
	net    netip.Prefix // that network
	kernel bool
	tunDev string
	listen netip.AddrPort // configured listener; port 0 until Nebula reports the bound one

	mu      sync.RWMutex // Reload and Stop write; everything else reads
	applied Config       // the config running now, own address already dropped
	yaml    string       // Render(applied): what Nebula holds; "" after a delta (appliedText)
	fp      string       // fingerprint of applied.Cert
	id      identity     // what inspect found in applied's certificate
	known   []netip.Addr // peers looked up by Tunnels and closeBlocked (peers.go)
	cache   tunnelCache  // the last Tunnels, by the tunnels' change count (tunnel.go)
	stopped bool

	tunRetry bool // the last addTunAddrs failed: a delta tries again (reload.go)
	// testOnlyFullReload makes Reload reload in full where it would apply
	// a delta: what the delta saves is measured against it.
	testOnlyFullReload bool
}

// Start validates c, checks its certificate against its CA and key, and
// starts Nebula: nebula.Main with its own slog logger bridged to log
// (tagged component=mesh), then Control.Start, or in userspace mode
// newNetstack, which starts it. Before returning it verifies the running
// instance against c (see Verify).
//
// Errors carry codes.ConfigInvalid (Validate) or codes.OverlayApply; a
// setting Nebula refused at start (a UDP port taken, a TUN device it
// cannot create) is named by a *ConfigError (startRefusal). A
// userspace instance whose start fails after Nebula was started cannot be
// stopped (see Stop) and is left running, unreachable.
func Start(c Config, log *slog.Logger) (*Mesh, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "mesh")
	if err := c.Validate(); err != nil {
		return nil, err
	}
	id, err := inspect(c, time.Now())
	if err != nil {
		return nil, codes.Wrap(codes.OverlayApply, fmt.Errorf("start overlay: %w", err))
	}
	eff := c.withoutSelf(id.ip)
	text, err := Render(eff)
	if err != nil {
		return nil, err
	}
	ll, bridge := newNebulaLogger(log)
	nc := config.NewC(ll)
	if err := nc.LoadString(text); err != nil {
		return nil, codes.Wrap(codes.OverlayApply, fmt.Errorf("start overlay: load rendered config: %w", err))
	}
	var factory overlay.DeviceFactory // nil: a kernel TUN device
	if c.Userspace {
		factory = overlay.NewUserDeviceFromConfig
	}
	ctrl, err := nebula.Main(nc, false, "", ll, factory)
	if err != nil {
		return nil, codes.Wrap(codes.OverlayApply, fmt.Errorf("start overlay: %w", startRefusal(c, err)))
	}
	ctrl.SetQuietPort(uint16(c.GossipPort)) // idle.go
	m := &Mesh{
		log: log, bridge: bridge, nc: nc, ctrl: ctrl,
		self: id.ip, net: id.network, kernel: !c.Userspace, tunDev: c.TunDev,
		listen:  netip.AddrPortFrom(addrOf(c.ListenHost), uint16(c.ListenPort)),
		applied: eff, yaml: text, fp: id.fingerprint, id: id, known: knownPeers(nil, eff),
	}
	if c.Userspace {
		ns, err := newNetstack(ctrl) // calls ctrl.Start
		if err != nil {
			return nil, codes.Wrap(codes.OverlayApply, fmt.Errorf("start overlay: %w", err))
		}
		m.stack = ns
	} else if err := ctrl.Start(); err != nil {
		// Nebula closed the device and its sockets: nothing runs. Said
		// here, not later as gossip failing to bind the overlay address
		// (issue 54: three joins under load failed that way).
		return nil, codes.Wrap(codes.OverlayApply, fmt.Errorf("start overlay: Nebula could not bring its TUN device up: %w", err))
	}
	if err := m.verify(eff, id.fingerprint); err != nil {
		m.Stop()
		return nil, err
	}
	m.warnRefusedOffloads(c) // offload.go
	log.Info("overlay started", keyOverlayIP, id.ip, keyUDP, m.udpAddr(),
		"lighthouse", c.AmLighthouse, "userspace", c.Userspace,
		"lighthouses", len(eff.Lighthouses), "static_hosts", len(eff.StaticHosts),
		"blocklist", len(eff.Blocklist), "cert_expires", id.expires)
	return m, nil
}

// Userspace reports whether this instance runs on a userspace network
// stack (DialContext, Listen and ListenPacket work), not a TUN device.
func (m *Mesh) Userspace() bool { return m.stack != nil }

// OverlayIP is this node's overlay address, from its certificate.
func (m *Mesh) OverlayIP() netip.Addr { return m.self }

// udpAddr is the underlay address Nebula listens on, with the bound port
// when the config asked for port 0.
func (m *Mesh) udpAddr() netip.AddrPort {
	if m.listen.Port() == 0 {
		if a := m.bridge.udpAddr(); a.IsValid() {
			return a
		}
	}
	return m.listen
}

// DialContext connects to addr (overlay IP and port) through the overlay.
// Userspace mode only: in kernel mode the overlay is an ordinary network
// interface, so use a net.Dialer.
func (m *Mesh) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	ns, err := m.netstack()
	if err != nil {
		return nil, err
	}
	return ns.dial(ctx, network, addr)
}

// Listen listens for TCP ("tcp", "tcp4") on the overlay, at this node's
// overlay address or the unspecified one (":7000" or "10.42.0.2:7000"),
// port non-zero. Userspace mode only.
func (m *Mesh) Listen(network, addr string) (net.Listener, error) {
	ns, err := m.netstack()
	if err != nil {
		return nil, err
	}
	if network != "tcp" && network != "tcp4" && network != "tcp6" {
		return nil, fmt.Errorf("mesh: listen: network %q, want tcp", network)
	}
	return ns.listenTCP(addr)
}

// ListenPacket opens a UDP socket ("udp", "udp4") on the overlay, bound
// as Listen binds. Userspace mode only.
func (m *Mesh) ListenPacket(network, addr string) (net.PacketConn, error) {
	ns, err := m.netstack()
	if err != nil {
		return nil, err
	}
	if network != "udp" && network != "udp4" && network != "udp6" {
		return nil, fmt.Errorf("mesh: listen: network %q, want udp", network)
	}
	return ns.listenUDP(addr)
}

func (m *Mesh) netstack() (*netstack, error) {
	if m.stack == nil {
		return nil, errors.New("mesh: dial and listen need userspace mode; in kernel mode use the overlay interface")
	}
	return m.stack, nil
}

// Stop shuts the instance down. Calling it again does nothing.
//
// Kernel mode: Control.Stop closes every tunnel (telling the peers) and
// the device; since v1.11 Nebula wakes its reader threads itself as it
// closes the TUN device (an eventfd its readers poll) and the UDP socket
// (shutdown(2)); v1.10.3 left them blocked in read(2) and recvmsg(2)
// (upstream issue #975), and Stop "kicked" them with a packet into the
// overlay route and a datagram to the listen port. Stop returns once it sees both released,
// or after releaseTimeout with a warning. A new Start in the same process
// can then take the same device name and port.
//
// Userspace mode: Stop does NOT stop Nebula. In v1.10.3 stopping a
// userspace instance exited the process (its reader called os.Exit(2) on
// the device pipe's io.EOF); since v1.11.0 it no longer does, but meshd's own gvisor
// stack on the device (netstack.go) has no teardown yet. Stop logs a
// warning and returns; the instance keeps running until the process
// exits, and its methods keep working.
func (m *Mesh) Stop() {
	if !m.kernel {
		m.log.Warn("overlay not stopped: a userspace instance (meshd's own network stack on Nebula's device) is not torn down; it runs until the process exits")
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	m.stopped = true
	start := time.Now()
	udp := m.udpAddr()
	m.ctrl.Stop()
	if err := m.release(udp); err != nil {
		m.log.Warn("overlay stopped, but Nebula still holds its resources; a restart in this process may fail",
			keyErr, err, "after", time.Since(start))
		return
	}
	m.log.Info("overlay stopped", "took", time.Since(start))
}

// release waits until the TUN device is gone and the UDP port can be
// bound again, with backoff, up to releaseTimeout.
func (m *Mesh) release(udp netip.AddrPort) error {
	deadline := time.Now().Add(releaseTimeout)
	wait := 2 * time.Millisecond
	for {
		tunGone, portFree := tunReleased(m.tunDev), portReleased(udp)
		if tunGone && portFree {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: tun %s released %t, udp %s released %t", releaseTimeout, m.tunDev, tunGone, udp, portFree)
		}
		time.Sleep(wait)
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// tunReleased reports whether the TUN device dev is gone.
func tunReleased(dev string) bool {
	// An ioctl on a socket of this namespace, not a netlink interface dump:
	// a dump while the device is being unregistered was seen to block for
	// good here (with v1.10.3, when a kick had to free Nebula's reader), and
	// sysfs shows the namespace it was mounted in, not necessarily ours.
	// SIOCGIFINDEX looks the name up under RCU, without the rtnl lock.
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(dev)
	if err != nil {
		return true
	}
	return unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr) == unix.ENODEV
}

// portReleased reports whether udp can be bound again (it is closed at
// once). An unknown port counts as released.
func portReleased(udp netip.AddrPort) bool {
	if udp.Port() == 0 {
		return true
	}
	network := "udp6"
	if udp.Addr().Is4() {
		network = "udp4"
	}
	c, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(udp))
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}
