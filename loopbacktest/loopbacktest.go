// Package loopbacktest hands tests their own loopback addresses, so that
// nodes in one test, and tests in concurrent test binaries, can all use
// meshd's default ports without colliding.
//
// Imports: none of the project's.
package loopbacktest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TakeIP reserves an address in net16.0.0/16 (net16 like "127.77") for
// the rest of the test, across processes: a flock'd file per address
// under the temp dir, released when the test ends.
func TakeIP(tb testing.TB, net16 string) string {
	tb.Helper()
	ip, f := take(tb, net16)
	tb.Cleanup(func() { _ = f.Close() })
	return ip
}

// HoldIP is TakeIP for the rest of the process: for an address something
// in the process keeps bound after its test ends (a userspace Nebula
// instance cannot be stopped, so its UDP port stays bound until the
// process exits, and a later test handed the same address could not bind
// it).
func HoldIP(tb testing.TB, net16 string) string {
	tb.Helper()
	ip, f := take(tb, net16)
	// A flock belongs to the open file description: a duplicate
	// descriptor, never closed, holds it after f is closed (or collected).
	if _, err := unix.Dup(int(f.Fd())); err != nil {
		tb.Fatal(err)
	}
	_ = f.Close()
	return ip
}

func take(tb testing.TB, net16 string) (string, *os.File) {
	tb.Helper()
	dir := filepath.Join(os.TempDir(), "meshd-test-ips")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		tb.Fatal(err)
	}
	for range 1000 {
		ip := fmt.Sprintf("%s.%d.%d", net16, rand.IntN(250)+1, rand.IntN(250)+2)
		f, err := os.OpenFile(filepath.Join(dir, ip), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			tb.Fatal(err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			_ = f.Close()
			continue
		}
		return ip, f
	}
	tb.Fatalf("no free loopback address in %s.0.0/16", net16)
	return "", nil
}
