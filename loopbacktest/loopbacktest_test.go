package loopbacktest_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/meshd/meshd/loopbacktest"
)

// TestTakeIP: addresses are in the asked /16, distinct while held.
func TestTakeIP(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		ip := loopbacktest.TakeIP(t, "127.79")
		a, err := netip.ParseAddr(ip)
		if err != nil || !a.IsLoopback() || !strings.HasPrefix(ip, "127.79.") {
			t.Fatalf("took %q", ip)
		}
		if seen[ip] {
			t.Fatalf("%s handed out twice while held", ip)
		}
		seen[ip] = true
	}
}

// TestHoldIP: an address held for the process stays locked after its
// test ended and after a garbage collection.
func TestHoldIP(t *testing.T) {
	var ip string
	t.Run("hold", func(t *testing.T) { ip = loopbacktest.HoldIP(t, "127.79") })
	runtime.GC()
	f, err := os.Open(filepath.Join(os.TempDir(), "meshd-test-ips", ip))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err == nil {
		t.Fatalf("%s was released when its test ended", ip)
	}
}
