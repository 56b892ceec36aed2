package mesh

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"testing"

	"github.com/slackhq/nebula/util"

	"github.com/meshd/meshd/codes"
)

// TestStartRefusal: what nebula.Main was doing when it failed names the
// Config field (and why): the UDP listener's errors the port, or the
// listen address it is not this machine's; the TUN device's the device,
// or the missing privilege. An error Nebula gives no context for stays as
// it is.
func TestStartRefusal(t *testing.T) {
	c := DefaultConfig()
	c.ListenHost, c.ListenPort, c.TunDev = "192.0.2.9", 4242, "meshd0"
	udp := func(errno error) error {
		return util.NewContextualError("Failed to open udp listener", map[string]any{"queue": 0}, fmt.Errorf("unable to bind to socket: %w", errno))
	}
	tun := func(errno error) error { return util.ContextualizeIfNeeded("Failed to get a tun/tap device", errno) }
	for _, tc := range []struct {
		name      string
		userspace bool
		err       error
		field     string
		value     string
	}{
		{"udp/taken", false, udp(syscall.EADDRINUSE), "ListenPort", "4242"},
		{"udp/not-local", false, udp(syscall.EADDRNOTAVAIL), "ListenHost", "192.0.2.9"},
		{"udp/denied", false, udp(syscall.EACCES), "ListenPort", "4242"},
		{"udp/other", false, udp(syscall.EINVAL), "ListenPort", "4242"},
		{"listen-host", false, util.ContextualizeIfNeeded("Failed to resolve listen.host", errors.New("no such host")), "ListenHost", "192.0.2.9"},
		{"tun/no-capability", false, tun(syscall.EPERM), "TunDev", "meshd0"},
		{"tun/busy", false, tun(syscall.EBUSY), "TunDev", "meshd0"},
		{"tun/userspace", true, tun(errors.New("netstack")), "Userspace", "true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := c
			c.Userspace = tc.userspace
			var ce *ConfigError
			got := startRefusal(c, tc.err)
			if !errors.As(got, &ce) || ce.Field != tc.field || ce.Value != tc.value {
				t.Fatalf("startRefusal(%v) = %v, want field %s = %q", tc.err, got, tc.field, tc.value)
			}
			if !errors.Is(got, tc.err) {
				t.Fatalf("%v lost Nebula's error %v", got, tc.err)
			}
		})
	}
	other := util.ContextualizeIfNeeded("Failed to load PKI from config", errors.New("bad cert"))
	if got := startRefusal(c, other); got != other {
		t.Fatalf("an error of no setting became %v", got)
	}
	plain := errors.New("plain")
	if got := startRefusal(c, plain); got != plain {
		t.Fatalf("a plain error became %v", got)
	}
}

// TestStartNamesTakenPort: a userspace instance whose UDP port another
// socket holds does not start, with codes.OverlayApply and a *ConfigError
// naming ListenPort and its value.
func TestStartNamesTakenPort(t *testing.T) {
	skipUnderRace(t)
	ca := testCA(t)
	cert, key := hostCert(t, ca, "a", 2)
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	port := pc.LocalAddr().(*net.UDPAddr).Port
	c := userspaceConfig(ca, cert, key)
	c.ListenPort = port
	m, err := Start(c, testLogger("a"))
	if err == nil {
		t.Fatalf("started on a taken port: %v", m.OverlayIP())
	}
	var ce *ConfigError
	if codes.Of(err) != codes.OverlayApply || !errors.As(err, &ce) || ce.Field != "ListenPort" || ce.Value != strconv.Itoa(port) ||
		!errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("start on a taken port: %v (%s), want %s naming ListenPort = %d", err, codes.Of(err), codes.OverlayApply, port)
	}
}
