package resolved

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// helperEnv, when set to a bus address, makes the test binary a fake
// resolved on that bus (see TestMain) instead of running tests.
const helperEnv = "MESHD_RESOLVED_TEST_FAKE_BUS"

func TestMain(m *testing.M) {
	if addr := os.Getenv(helperEnv); addr != "" {
		os.Exit(fakeHelper(addr))
	}
	os.Exit(m.Run())
}

// fakeHelper serves a fake resolved that knows lo, says "ready" on stdout,
// and serves until stdin closes.
func fakeHelper(addr string) int {
	f, err := serveFake(addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake resolved:", err)
		return 1
	}
	defer f.conn.Close()
	f.addLink(1, defaultLink()) // lo is 1 in a new network namespace
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// otherNetNS starts `unshare -n ARGS...` and returns its PID and stdout.
// It skips unless this process may create network namespaces.
func otherNetNS(t *testing.T, env []string, args ...string) (*exec.Cmd, *bufio.Reader, io.WriteCloser) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for unshare -n (a process in another network namespace); the comparison itself is TestSameNetNS")
	}
	un, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1)")
	}
	cmd := exec.Command(un, append([]string{"-n"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = &testWriter{t}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	return cmd, bufio.NewReader(out), in
}

// readLine reads one line from r within 10 s.
func readLine(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	ch := make(chan string, 1)
	go func() { // ends when the child closes stdout (Cleanup kills it)
		s, _ := r.ReadString('\n')
		ch <- strings.TrimSpace(s)
	}()
	select {
	case s := <-ch:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("child printed nothing within 10 s")
	}
	return ""
}

func TestSameNetNS(t *testing.T) {
	for _, tc := range []struct {
		name        string
		self, other string
		differ      bool
	}{
		{"same/self", selfNetNS, selfNetNS, false},
		{"same/own pid", selfNetNS, fmt.Sprintf("/proc/%d/ns/net", os.Getpid()), false},
		{"differ/another namespace file", selfNetNS, "/proc/self/ns/uts", true},
		{"unknown/hidden or gone: proceed", selfNetNS, "/proc/999999999/ns/net", false},
		{"unknown/self unreadable: proceed", "/nonexistent/ns/net", selfNetNS, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := sameNetNS(tc.self, tc.other); (err != nil) != tc.differ {
				t.Fatalf("sameNetNS(%s, %s) = %v, want differ=%v", tc.self, tc.other, err, tc.differ)
			}
		})
	}
	t.Run("differ/a process in a new network namespace", func(t *testing.T) {
		cmd, out, _ := otherNetNS(t, nil, "sh", "-c", "echo up; exec cat")
		if s := readLine(t, out); s != "up" {
			t.Fatalf("child said %q", s)
		}
		// unshare execs sh, which execs cat: the PID stays the same.
		err := sameNetNS(selfNetNS, fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid))
		if err == nil {
			t.Fatal("same namespace, want a difference")
		}
		t.Log(err)
	})
}

// TestGuardRefusesOtherNetNS runs the fake resolved in a new network
// namespace, as the host's resolved is to a meshd in an e2e namespace:
// Ensure and Revert must refuse and change nothing.
func TestGuardRefusesOtherNetNS(t *testing.T) {
	addr := startBus(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	_, out, _ := otherNetNS(t, []string{helperEnv + "=" + addr}, exe)
	if s := readLine(t, out); s != "ready" {
		t.Fatalf("fake resolved said %q", s)
	}
	idx, name := loopback(t)
	if idx != 1 {
		t.Skipf("lo is ifindex %d here; the helper's link is 1", idx)
	}
	c := dial(t, addr)
	l := Link{IfIndex: int(idx), IfName: name, Server: netip.MustParseAddr("10.1.0.1"), Domain: "prod.mesh"}
	changed, err := c.Ensure(ctxT(t), l)
	if !errors.Is(err, ErrOtherNetNS) || changed {
		t.Fatalf("Ensure: changed %v, %v; want false, ErrOtherNetNS", changed, err)
	}
	t.Log(err)
	if err := c.Revert(ctxT(t), int(idx)); !errors.Is(err, ErrOtherNetNS) {
		t.Fatalf("Revert: %v, want ErrOtherNetNS", err)
	}

	// The helper's link is as it started: nothing was set or reverted.
	var props map[string]dbus.Variant
	if err := c.conn.Object(resolvedName, linkPath(1)).CallWithContext(ctxT(t), "org.freedesktop.DBus.Properties.GetAll", 0, linkIface).Store(&props); err != nil {
		t.Fatal(err)
	}
	have, err := stateFromProps(props)
	if err != nil {
		t.Fatal(err)
	}
	d := defaultLink()
	if want := (linkState{DNS: []dnsAddr{}, Domains: []domain{}, DefaultRoute: d.DefaultRoute, LLMNR: d.LLMNR, MulticastDNS: d.MulticastDNS, DNSSEC: d.DNSSEC}); !reflect.DeepEqual(have, want) {
		t.Errorf("the other namespace's link changed: %+v", have)
	}
}
