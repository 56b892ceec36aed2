package loopbacktest_test

import (
	"net/netip"
	"strings"
	"testing"

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
