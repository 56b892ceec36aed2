// Package localclienttest runs stand-in meshd local APIs on unix sockets
// for the tests of localclient and meshctl.
//
// Import rule: standard library only.
package localclienttest

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

// ShortDir is a temp dir short enough for unix socket paths (under ~108
// bytes), removed when the test ends.
func ShortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "lc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// Serve runs h on a fresh unix socket until the test ends and returns the
// socket's path.
func Serve(t testing.TB, h http.Handler) string {
	t.Helper()
	sock := filepath.Join(ShortDir(t), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return sock
}
