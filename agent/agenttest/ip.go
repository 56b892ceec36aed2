package agenttest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TakeIP reserves a loopback address in 127.77.0.0/16 for the rest of the
// test, across processes (a flock'd file per address), so concurrent test
// binaries can use meshd's default ports without colliding.
func TakeIP(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "meshd-test-ips")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		ip := fmt.Sprintf("127.77.%d.%d", rand.IntN(250)+1, rand.IntN(250)+2)
		f, err := os.OpenFile(filepath.Join(dir, ip), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			_ = f.Close()
			continue
		}
		t.Cleanup(func() { _ = f.Close() })
		return ip
	}
	t.Fatal("no free loopback address in 127.77.0.0/16")
	return ""
}
