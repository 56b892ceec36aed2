package mesh

import (
	"log/slog"
	"strings"

	"github.com/meshd/meshd/codes"
)

// Offloads (issue 53): Nebula v1.12 can move many packets per system call
// on Linux. tun.use_offloads opens the TUN device with virtio headers, so
// one read brings a whole TCP (TSO) or UDP (USO) segment of up to 64 KiB
// that Nebula cuts, encrypts and sends as one batch; listen.udp_offloads
// turns on UDP GRO (the kernel hands one read many datagrams of a flow)
// and GSO (one sendmmsg entry carries many datagrams). Both are off by
// default in v1.12.0 and read once, at start; Config.Offloads asks for
// both, and DefaultConfig does.
//
// A kernel or device that refuses one is no failed start: Nebula falls back
// to one packet per call (overlay/tun_linux.go newTun tries TSO+USO, then
// TSO, then no virtio headers; udp/udp_linux.go prepareGRO,
// udp_linux_writebatch.go prepareGSO probe a socket option each) and logs
// what it got. Nebula's Control API does not say, so the log bridge reads
// those lines, as it reads the bound UDP address: "TUN offload status"
// (tso, uso), "udp: GRO enabled"/"udp: GRO disabled", "udp: GSO
// enabled"/"udp: GSO disabled", and "udp: kernel rejected GSO send,
// disabling GSO" when a route refuses GSO later (a device without TX
// checksum offload). Start logs one warning (codes.OffloadRefused) naming
// what was asked for and not given; agent/metrics exports each offload
// (meshd_overlay_offload) and status shows them.

// Offloads says which of Nebula's offloads this instance asked for and got.
type Offloads struct {
	Requested bool // Config.Offloads: asked for at start
	TSO       bool // TUN reads bring TCP segments (kernel mode)
	USO       bool // and UDP segments (Linux 6.2 or later)
	GRO       bool // UDP receives coalesce a flow's datagrams
	GSO       bool // UDP sends carry many datagrams per entry
}

// InUse are the names of the offloads in use, in a fixed order.
func (o Offloads) InUse() []string {
	var out []string
	for _, f := range o.flags() {
		if f.on {
			out = append(out, f.name)
		}
	}
	return out
}

// Refused are the offloads asked for and not in use: none when none were
// asked for. userspace leaves out the TUN ones (a userspace device has no
// virtio headers to offer).
func (o Offloads) Refused(userspace bool) []string {
	if !o.Requested {
		return nil
	}
	var out []string
	for _, f := range o.flags() {
		if !f.on && (!f.tun || !userspace) {
			out = append(out, f.name)
		}
	}
	return out
}

type offloadFlag struct {
	name string
	on   bool
	tun  bool
}

func (o Offloads) flags() []offloadFlag {
	return []offloadFlag{{"tso", o.TSO, true}, {"uso", o.USO, true}, {"gro", o.GRO, false}, {"gso", o.GSO, false}}
}

// Offloads reports the offloads this instance asked for and Nebula says
// it uses now (see the comment at the top of offload.go).
func (m *Mesh) Offloads() Offloads {
	o := m.bridge.offloadState()
	m.mu.RLock()
	o.Requested = m.applied.Offloads
	m.mu.RUnlock()
	return o
}

// offloadSeen tracks what Nebula's log lines said of its offloads. The
// UDP lines come once per listener (one per routine): an offload counts
// as on only if every listener said enabled and none said otherwise.
type offloadSeen struct {
	tso, uso      bool
	groOn, groOff bool
	gsoOn, gsoOff bool
}

// observe reads one Nebula line; it is called with the bridge's
// lock held.
func (s *offloadSeen) observe(msg string, attrs []slog.Attr) {
	switch msg {
	case "TUN offload status":
		for _, a := range attrs {
			switch a.Key {
			case "tso":
				s.tso = a.Value.Kind() == slog.KindBool && a.Value.Bool()
			case "uso":
				s.uso = a.Value.Kind() == slog.KindBool && a.Value.Bool()
			}
		}
	case "udp: GRO enabled":
		s.groOn = true
	case "udp: GRO disabled":
		s.groOff = true
	case "udp: GSO enabled":
		s.gsoOn = true
	case "udp: GSO disabled":
		s.gsoOff = true
	case "udp: kernel rejected GSO send, disabling GSO":
		s.gsoOff = true
	}
}

// offloadState is what the bridge has seen so far.
func (b *logBridge) offloadState() Offloads {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.offload
	return Offloads{TSO: s.tso, USO: s.tso && s.uso, GRO: s.groOn && !s.groOff, GSO: s.gsoOn && !s.gsoOff}
}

// warnRefusedOffloads logs the one warning Start owes when an offload c
// asked for is not in use.
func (m *Mesh) warnRefusedOffloads(c Config) {
	o := m.Offloads()
	refused := o.Refused(c.Userspace)
	if len(refused) == 0 {
		return
	}
	m.log.Warn("overlay offloads refused by this kernel or device; the overlay runs without them, at more CPU per packet",
		keyCode, codes.OffloadRefused, "refused", strings.Join(refused, ","), "in_use", strings.Join(o.InUse(), ","))
}
