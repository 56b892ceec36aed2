//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/stocknebula"
)

// stockMember is a device running the stock nebula binary (issue 35) on
// its own host of the test network, configured only from the bundle
// `meshctl nebula-bundle` wrote there.
type stockMember struct {
	Host *Host
	Name string
	Dir  string // the bundle directory
	cmd  *exec.Cmd
	log  *syncLog
}

// syncLog is a process's output, readable while it runs.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// newStockMember mints a --nebula-only token for name on via (extra
// flags appended), writes it to a 0600 file on a new host, runs `meshctl
// nebula-bundle --generate` there (no meshd on that host, no socket),
// checks the bundle with stock `nebula -test` of version, and starts it
// from the bundle directory. The process is killed, and its log shown on
// failure, when the test ends.
func newStockMember(t testing.TB, n *Net, via *Node, version, name string, extra ...string) *stockMember {
	t.Helper()
	bin := stocknebula.BinaryAt(t, version)
	h := n.AddHost(name)
	var adm struct{ Token string }
	if err := via.CtlJSON(t.Context(), &adm, append([]string{"admit", name, "--nebula-only"}, extra...)...); err != nil {
		t.Fatalf("admit %s --nebula-only: %v", name, err)
	}
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(adm.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "bundle")
	b, err := h.Exec(t.Context(), filepath.Join(binDir, "meshctl"), "nebula-bundle", "--token-file", tokenFile, "--generate", "--out", out).CombinedOutput()
	if err != nil {
		t.Fatalf("meshctl nebula-bundle on %s: %v\n%s", h.Name, err, b)
	}
	t.Logf("meshctl nebula-bundle on %s:\n%s", name, b)
	test := h.Exec(t.Context(), bin, "-test", "-config", "config.yml")
	test.Dir = out
	if b, err := test.CombinedOutput(); err != nil {
		t.Fatalf("stock nebula -test on %s's bundle: %v\n%s", name, err, b)
	}
	m := &stockMember{Host: h, Name: name, Dir: out, log: &syncLog{}}
	m.cmd = h.Exec(context.WithoutCancel(t.Context()), bin, "-config", "config.yml")
	m.cmd.Dir, m.cmd.Stdout, m.cmd.Stderr = out, m.log, m.log
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("start stock nebula on %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = m.cmd.Process.Kill()
		_ = m.cmd.Wait()
		if t.Failed() {
			t.Logf("stock nebula on %s:\n%s", name, m.log.String())
		}
	})
	return m
}

// reaches reports nil once a pings every address of to and each member of
// to pings a's address, over the overlay (IPv4 and, with ip6 set, IPv6).
func reachBoth(ctx context.Context, m *stockMember, ip, ip6 string, nodes []*Node, ips, ips6 map[string]string) error {
	for _, nd := range nodes {
		if err := m.Host.Ping(ctx, ips[nd.NodeName]); err != nil {
			return err
		}
		if err := nd.Ping(ctx, ip); err != nil {
			return err
		}
		if ip6 != "" {
			if err := ping6(ctx, m.Host, ips6[nd.NodeName]); err != nil {
				return err
			}
			if err := ping6(ctx, nd.Host, ip6); err != nil {
				return err
			}
		}
	}
	return nil
}

// cutOff reports nil while m reaches none of nodes over the overlay and
// none of them reaches m (one echo each way, 0.2 s).
func cutOff(ctx context.Context, m *stockMember, ip string, nodes []*Node, ips map[string]string) error {
	for _, nd := range nodes {
		if m.Host.Ping(ctx, ips[nd.NodeName]) == nil {
			return fmt.Errorf("%s still reaches %s", m.Name, nd.NodeName)
		}
		if nd.Ping(ctx, ip) == nil {
			return fmt.Errorf("%s still reaches %s", nd.NodeName, m.Name)
		}
	}
	return nil
}

func ping6(ctx context.Context, h *Host, ip string) error {
	out, err := h.Exec(ctx, "ping", "-6", "-c", "1", "-W", "0.2", "-q", ip).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ping -6 %s from %s: %v: %s", ip, h.Name, err, bytes.TrimSpace(out))
	}
	return nil
}

// TestStockNebulaMember (issue 35), with `timers: lan` (meshd's default):
// two devices run stock nebula, the phone v1.12.0 (the version meshd
// embeds) and the tablet v1.11.0 (issue 53 item 4), both built by the
// test from the module proxy, not meshd's code, each configured only from the bundle `meshctl
// nebula-bundle --generate` wrote on its host (the bundle passes stock
// `nebula -test`). The phone pings every meshd member over both overlays
// and each pings it; it resolves names with a member's DNS over the
// overlay; `meshctl nodes` lists it as an active nebula member with its
// certificate's expiry. Removed, it is cut off both ways within 2 s of
// `remove` returning, and stays so. The tablet, admitted with a 40 s
// certificate, reaches the members until its certificate expires and is
// refused both ways after.
func TestStockNebulaMember(t *testing.T) {
	n := NewNet(t)
	n.Timers = "lan"
	nodes := cluster(t, n, "w1")
	origin := nodes[0]
	allPairsPing(t, nodes, 30*time.Second)

	phone := newStockMember(t, n, origin, stocknebula.Version, "phone", "--group", "mobile")
	tablet := newStockMember(t, n, origin, "v1.11.0", "tablet", "--cert-lifetime", "40s")
	tabletBundled := time.Now()
	ips, ips6 := overlayIPs(t, origin), map[string]string{}
	var rows = map[string]apitype.Node{}
	for _, r := range origin.Nodes(t) {
		ips6[r.Name], rows[r.Name] = r.OverlayIP6, r
	}
	for _, name := range []string{"phone", "tablet"} {
		r := rows[name]
		if r.Role != "nebula" || r.State != "active" || r.CertExpires.IsZero() || r.OverlayIP6 == "" {
			t.Fatalf("nodes lists %s as %+v, want an active nebula member with a certificate expiry and both overlay addresses", name, r)
		}
	}
	if d := time.Until(rows["phone"].CertExpires); d < 29*24*time.Hour || d > 31*24*time.Hour {
		t.Fatalf("phone's certificate expires in %s, want the 30-day default", d)
	}

	took := Eventually(t, 30*time.Second, "the stock phone and every member reach each other over both overlays", func() error {
		return reachBoth(t.Context(), phone, ips["phone"], ips6["phone"], nodes, ips, ips6)
	})
	t.Logf("phone reached every member both ways %s after its nebula started (timers: lan)", took.Round(time.Millisecond))
	Eventually(t, 10*time.Second, "the phone resolves w1 with origin's DNS over the overlay", func() error {
		r, err := dig(t.Context(), phone.Host, "@"+ips["origin"], "w1.e2e.mesh", "A")
		if err != nil {
			return err
		}
		if r.Status != "NOERROR" || len(r.Answers) != 1 || !strings.HasSuffix(r.Answers[0], " "+ips["w1"]) {
			return fmt.Errorf("dig w1.e2e.mesh: %+v", r)
		}
		return nil
	})
	if r, err := dig(t.Context(), nodes[1].Host, "@"+ips["w1"], "phone.e2e.mesh", "A"); err != nil ||
		len(r.Answers) != 1 || !strings.HasSuffix(r.Answers[0], " "+ips["phone"]) {
		t.Fatalf("w1's DNS for phone.e2e.mesh: %+v %v, want %s", r, err, ips["phone"])
	}
	Eventually(t, 30*time.Second, "the stock tablet and every member reach each other", func() error {
		return reachBoth(t.Context(), tablet, ips["tablet"], "", nodes, ips, ips6)
	})

	// Removal: cut off both ways within 2 s of remove returning.
	start := time.Now()
	origin.MustCtl(t, "remove", "phone")
	returned := time.Since(start)
	gone, err := waitFor(t.Context(), removalWithin, func() error { return cutOff(t.Context(), phone, ips["phone"], nodes, ips) })
	if err != nil {
		t.Fatalf("phone not cut off within %s of remove returning: %v", removalWithin, err)
	}
	t.Logf("remove phone returned after %s; phone cut off both ways %s after that (timers: lan)", returned.Round(time.Millisecond), gone.Round(time.Millisecond))
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		if err := cutOff(t.Context(), phone, ips["phone"], nodes, ips); err != nil {
			t.Fatalf("removed phone: %v", err)
		}
	}

	// Expiry: the tablet's 40 s certificate runs out; after it the
	// members refuse it both ways (disconnect_invalid on every meshd).
	if wait := time.Until(tabletBundled.Add(40 * time.Second)); wait > 0 {
		if err := tablet.Host.Ping(t.Context(), ips["origin"]); err != nil {
			t.Fatalf("tablet before its certificate expires (%s left): %v", wait.Round(time.Second), err)
		}
		time.Sleep(wait) // the certificate's own expiry: no event to wait on
	}
	after, err := waitFor(t.Context(), 30*time.Second, func() error { return cutOff(t.Context(), tablet, ips["tablet"], nodes, ips) })
	if err != nil {
		t.Fatalf("tablet not refused within 30 s of its certificate's expiry: %v", err)
	}
	t.Logf("tablet cut off both ways %s after its certificate expired (timers: lan)", after.Round(time.Millisecond))
}
