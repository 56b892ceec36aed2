package mesh

import (
	"bytes"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/meshd/meshd/codes"
)

// TestOffloadsSeen: the bridge reads Nebula's offload lines as Nebula
// v1.12.0 logs them (the messages and attributes of overlay/tun_linux.go
// and udp/), and Start's warning names what was refused: a kernel that
// took TSO but not USO, GRO on one listener but not the other, and GSO
// until a route refused a send.
func TestOffloadsSeen(t *testing.T) {
	ll, bridge := newNebulaLogger(slog.New(slog.DiscardHandler))
	ll.Info("TUN offload status", "tso", true, "uso", false)
	ll.Info("udp: GRO enabled")
	ll.Info("udp: GRO disabled", "reason", "kernel rejected probe", "error", "EINVAL")
	ll.Info("udp: GSO enabled", "maxGSOSegments", 127)
	if got := bridge.offloadState(); got != (Offloads{TSO: true, GSO: true}) {
		t.Fatalf("after TSO only, GRO refused by one listener, GSO: %+v", got)
	}
	ll.Warn("udp: kernel rejected GSO send, disabling GSO", "error", "EIO")
	o := bridge.offloadState()
	o.Requested = true
	if got := o.InUse(); !slices.Equal(got, []string{"tso"}) {
		t.Errorf("InUse %v, want [tso]", got)
	}
	if got := o.Refused(false); !slices.Equal(got, []string{"uso", "gro", "gso"}) {
		t.Errorf("Refused(kernel) %v, want [uso gro gso]", got)
	}
	if got := o.Refused(true); !slices.Equal(got, []string{"gro", "gso"}) {
		t.Errorf("Refused(userspace) %v, want [gro gso]: a user device has no TUN offloads to refuse", got)
	}
	if got := (Offloads{}).Refused(false); got != nil {
		t.Errorf("offloads not asked for: Refused %v, want none", got)
	}

	var logged bytes.Buffer
	m := &Mesh{log: slog.New(slog.NewTextHandler(&logged, nil)), bridge: bridge, applied: Config{Offloads: true}}
	m.warnRefusedOffloads(Config{Offloads: true})
	if out := logged.String(); strings.Count(out, "\n") != 1 || !strings.Contains(out, string(codes.OffloadRefused)) ||
		!strings.Contains(out, "refused=uso,gro,gso") || !strings.Contains(out, "in_use=tso") {
		t.Errorf("warning %q, want one line with %s, refused=uso,gro,gso and in_use=tso", out, codes.OffloadRefused)
	}
	logged.Reset()
	m.applied.Offloads = false
	m.warnRefusedOffloads(Config{})
	if logged.Len() != 0 {
		t.Errorf("offloads not asked for, yet warned: %q", logged.String())
	}
}

// TestKernelOffloads: on this kernel (TUN with virtio headers, USO since
// Linux 6.2, UDP GRO and GSO) a kernel-TUN instance asked for offloads
// gets all four and warns of none; one not asked for uses none and
// reports none refused; ProbeOffloads (check-config's) says what Start
// got. It needs root (see inNetns).
func TestKernelOffloads(t *testing.T) {
	if !inNetns(t) {
		return
	}
	if err := loopbackUp(); err != nil {
		t.Fatalf("bring lo up: %v", err)
	}
	ca := testCA(t)
	certPEM, keyPEM := hostCert(t, ca, "offloads", 1)
	for _, on := range []bool{true, false} {
		c := DefaultConfig()
		c.CACert, c.Cert, c.Key = ca.NebulaCertPEM(), certPEM, keyPEM
		c.AmLighthouse, c.Offloads = true, on
		c.StaticHosts = map[netip.Addr][]netip.AddrPort{overlayIP(2).Addr(): {ap("192.0.2.2:4242")}}
		var logged bytes.Buffer
		m, err := Start(c, slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn})))
		if err != nil {
			t.Fatalf("offloads %v: start: %v", on, err)
		}
		o := m.Offloads()
		m.Stop()
		want := Offloads{}
		if on {
			want = Offloads{Requested: true, TSO: true, USO: true, GRO: true, GSO: true}
		}
		if o != want {
			t.Errorf("offloads %v: %+v, want %+v", on, o, want)
		}
		if probed, err := ProbeOffloads(true); on && (probed != o || err != nil) {
			t.Errorf("check-config's probe says %+v (%v), the started overlay got %+v", probed, err, o)
		}
		if strings.Contains(logged.String(), string(codes.OffloadRefused)) {
			t.Errorf("offloads %v: warned %q", on, logged.String())
		}
		t.Logf("offloads asked %v: in use %v", on, o.InUse())
	}
}
