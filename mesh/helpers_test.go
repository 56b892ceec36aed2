package mesh

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshd/meshd/pki"
)

var meshLogs = flag.Bool("meshlogs", false, "send the Nebula instances' logs (debug and up) to stderr")

// overlayNet is the overlay of the test CAs.
var overlayNet = netip.MustParsePrefix("10.42.0.0/16")

// Lighthouse ports are taken from this range under a per-port flock, so
// concurrent test processes never pick the same one; the lock is held
// until the test process exits.
const (
	portFirst = 42000
	portLast  = 42999
)

// skipUnderRace skips tests that run Nebula: Nebula has data races of its
// own (research §1), so these tests run without -race.
func skipUnderRace(t *testing.T) {
	t.Helper()
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "-race" && s.Value == "true" {
				t.Skip("runs Nebula, which has data races of its own; run this package without -race")
			}
		}
	}
}

// testLogger returns a logger for one instance: stderr under -meshlogs,
// otherwise nothing. Never t.Log: userspace instances outlive their test.
func testLogger(name string) *slog.Logger {
	if !*meshLogs {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", name)
}

// testCA is a cluster CA for one test.
func testCA(t testing.TB) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA("meshtest", overlayNet, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// hostCert issues a Nebula host certificate for 10.42.0.n and returns it
// with its key.
func hostCert(t testing.TB, ca *pki.CA, name string, n byte) (certPEM, keyPEM []byte) {
	t.Helper()
	keys, err := pki.NewKeys(name)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err = ca.SignNebula(pki.NebulaRequest{
		PublicKey: keys.NebulaPublicPEM, Name: name, IP: overlayIP(n), Groups: []string{"worker"},
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return certPEM, keys.NebulaKeyPEM
}

// overlayIP is 10.42.0.n/16.
func overlayIP(n byte) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 42, 0, n}), overlayNet.Bits())
}

// fingerprint is the fingerprint of a PEM Nebula certificate.
func fingerprint(t *testing.T, certPEM []byte) string {
	t.Helper()
	fp, _, err := pki.NebulaCertInfo(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return fp
}

// userspaceConfig is a userspace node on 127.0.0.1 with test timers that
// advertises no local address (loopback is never advertised), so the
// lighthouse uses the address it observes.
func userspaceConfig(ca *pki.CA, certPEM, keyPEM []byte) Config {
	c := DefaultConfig()
	c.CACert, c.Cert, c.Key = ca.NebulaCertPEM(), certPEM, keyPEM
	c.ListenHost, c.ListenPort = "127.0.0.1", 0
	c.Userspace, c.Fast = true, true
	c.LocalAllowList = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	return c
}

// startLighthouse starts c as a lighthouse on a port from the locked range,
// trying the next port when one is taken by another process. It returns
// the instance and its port.
func startLighthouse(t testing.TB, c Config, log *slog.Logger) (*Mesh, int) {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "meshd-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	var lastErr error
	for port := portFirst; port <= portLast; port++ {
		fd, err := lockPort(dir, port)
		if err != nil {
			continue // held by another test process
		}
		c.AmLighthouse, c.ListenPort = true, port
		m, err := Start(c, log)
		if err != nil {
			lastErr = err
			_ = syscall.Close(fd) // releases the lock
			continue
		}
		// fd stays open, and the lock held, until the process exits: the
		// userspace instance is never stopped, so the port stays bound.
		return m, port
	}
	t.Fatalf("no lighthouse port in %d-%d: %v", portFirst, portLast, lastErr)
	return nil, 0
}

// lockPort takes a non-blocking exclusive flock on dir/<port>.lock. It
// returns a raw descriptor, which no finalizer closes behind our back.
func lockPort(dir string, port int) (int, error) {
	fd, err := syscall.Open(filepath.Join(dir, fmt.Sprintf("%d.lock", port)), syscall.O_CREAT|syscall.O_RDWR|syscall.O_CLOEXEC, 0o666)
	if err != nil {
		return -1, err
	}
	if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}

// serveEcho accepts on l and echoes every connection. Cleanup closes l and
// waits for the goroutines; a connection lives at most echoDeadline.
func serveEcho(t *testing.T, l net.Listener) {
	t.Helper()
	const echoDeadline = 30 * time.Second
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(echoDeadline))
				_, _ = io.Copy(c, c)
			})
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		wg.Wait()
	})
}

// echo dials addr through m, sends a message and reads it back.
func echo(ctx context.Context, m *Mesh, addr string) error {
	c, err := m.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("dial %s: %w", addr, err)
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(d)
	}
	msg := []byte("meshd overlay echo")
	if _, err := c.Write(msg); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if string(got) != string(msg) {
		return fmt.Errorf("echo returned %q", got)
	}
	return nil
}

// waitFor polls cond with backoff until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) bool {
	wait := 2 * time.Millisecond
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		if cond() {
			return true
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// testLighthouse starts a userspace lighthouse, "lh" at overlayIP(1), and
// returns it with the Lighthouses entry a member's config names it by.
func testLighthouse(tb testing.TB, ca *pki.CA) (*Mesh, []Lighthouse) {
	tb.Helper()
	c, k := hostCert(tb, ca, "lh", 1)
	lh, port := startLighthouse(tb, userspaceConfig(ca, c, k), testLogger("lh"))
	return lh, []Lighthouse{{OverlayIP: overlayIP(1).Addr(), Underlay: []netip.AddrPort{netip.AddrPortFrom(ip("127.0.0.1"), uint16(port))}}}
}

// memberConfig is the userspace config of member name at overlayIP(n),
// whose lighthouses are lhs.
func memberConfig(tb testing.TB, ca *pki.CA, name string, n byte, lhs []Lighthouse) Config {
	tb.Helper()
	c, k := hostCert(tb, ca, name, n)
	cfg := userspaceConfig(ca, c, k)
	cfg.Lighthouses = lhs
	return cfg
}

// silentPeerNode starts a userspace node "a" whose one static host, at
// overlayIP(2), is a UDP socket of the test's that reads and never
// answers; it returns the node, the socket and the silent address.
func silentPeerNode(t *testing.T) (*Mesh, *net.UDPConn, netip.Addr) {
	t.Helper()
	ca := testCA(t)
	aCert, aKey := hostCert(t, ca, "a", 1)
	peer, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	silent := overlayIP(2).Addr()
	c := userspaceConfig(ca, aCert, aKey)
	c.StaticHosts = map[netip.Addr][]netip.AddrPort{silent: {peer.LocalAddr().(*net.UDPAddr).AddrPort()}}
	a, _ := startLighthouse(t, c, testLogger("a"))
	return a, peer, silent
}

// kernelConfig is a kernel-TUN lighthouse's config, "kernel" at
// overlayIP(1), with one static host at overlayIP(2) on underlay peer; it
// brings the namespace's loopback up first (the caller is in a fresh
// network namespace: inNetns).
func kernelConfig(t *testing.T, peer string) Config {
	t.Helper()
	if err := loopbackUp(); err != nil {
		t.Fatalf("bring lo up: %v", err)
	}
	ca := testCA(t)
	certPEM, keyPEM := hostCert(t, ca, "kernel", 1)
	c := DefaultConfig()
	c.CACert, c.Cert, c.Key = ca.NebulaCertPEM(), certPEM, keyPEM
	c.AmLighthouse = true
	c.StaticHosts = map[netip.Addr][]netip.AddrPort{overlayIP(2).Addr(): {ap(peer)}}
	return c
}
