package main

import (
	"encoding/json"
	"net/http"
	"runtime"
	"testing"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient/localclienttest"
	"github.com/meshd/meshd/codes"
)

// setBuild pins this meshctl's version and commit (as -ldflags would) for
// one test.
func setBuild(t *testing.T, v, c string) {
	oldV, oldC := version, commit
	version, commit = v, c
	t.Cleanup(func() { version, commit = oldV, oldC })
}

// versionMeshd is a meshd whose GET /v0/version answers b, or, with old,
// a meshd older than that route: 404 with its version in the header.
func versionMeshd(t *testing.T, b apitype.Build, old bool) string {
	return localclienttest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(apitype.VersionHeader, b.Version)
		if old || r.Method != http.MethodGet || r.URL.Path != apitype.PathVersion {
			http.NotFound(w, r)
			return
		}
		writeJSON(w, http.StatusOK, b)
	}))
}

func TestVersion(t *testing.T) {
	same := apitype.Build{Version: "1.4.0", Commit: "0123abcd4567", Go: runtime.Version()} // the client's own toolchain
	older := apitype.Build{Version: "1.3.0", Commit: "89ab01234567", Go: "go1.25.1"}
	dirty := apitype.Build{Version: "1.4.0", Commit: "0123abcd4567-dirty", Go: runtime.Version()}
	tests := []struct {
		name      string
		socket    func(t *testing.T) string
		json      bool
		exit      int
		mismatch  bool
		reachable bool
	}{
		{"same", func(t *testing.T) string { return versionMeshd(t, same, false) }, false, exitOK, false, true},
		{"same-json", func(t *testing.T) string { return versionMeshd(t, same, false) }, true, exitOK, false, true},
		{"older-daemon", func(t *testing.T) string { return versionMeshd(t, older, false) }, false, exitOK, true, true},
		{"older-daemon-json", func(t *testing.T) string { return versionMeshd(t, older, false) }, true, exitOK, true, true},
		{"other-commit", func(t *testing.T) string { return versionMeshd(t, dirty, false) }, false, exitOK, true, true},
		{"daemon-without-route", func(t *testing.T) string { return versionMeshd(t, older, true) }, false, exitOK, true, true},
		{"unreachable", nowhere, false, exitUnreachable, false, false},
		{"unreachable-json", nowhere, true, exitUnreachable, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setBuild(t, "1.4.0", "0123abcd4567")
			sock := tt.socket(t)
			argv := []string{"--socket", sock, "version"}
			if tt.json {
				argv = append(argv, "-o", "json")
			}
			r := meshctl(t, argv...)
			if r.exit != tt.exit {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.exit, tt.exit, r.stdout, r.stderr)
			}
			if !tt.reachable {
				checkFailure(t, r, exitUnreachable, codes.DaemonUnreachable)
			}
			if tt.json {
				var v versionJSON
				if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
					t.Fatalf("stdout is not one JSON document: %v\n%s", err, r.stdout)
				}
				if (v.Daemon != nil) != tt.reachable || (v.DaemonError != nil) == tt.reachable {
					t.Fatalf("daemon %+v, daemon_error %+v; want reachable=%v", v.Daemon, v.DaemonError, tt.reachable)
				}
				if got := len(v.Warnings) == 1 && v.Warnings[0].Code == codes.VersionMismatch; got != tt.mismatch {
					t.Fatalf("warnings %+v, want a %s warning: %v", v.Warnings, codes.VersionMismatch, tt.mismatch)
				}
			} else if got := lineWith(r.stderr, "warning "+string(codes.VersionMismatch)+": "); got != tt.mismatch {
				t.Fatalf("stderr:\n%s\nwant a %s warning line: %v", r.stderr, codes.VersionMismatch, tt.mismatch)
			}
			checkGolden(t, "version-"+tt.name, r, sock, "SOCKET")
		})
	}
	t.Run("usage/extra-argument", func(t *testing.T) {
		if r := meshctl(t, "--socket", nowhere(t), "version", "now"); r.exit != exitUsage {
			t.Fatalf("exit %d, want %d", r.exit, exitUsage)
		}
	})
}

// lineWith reports whether a line of s starts with prefix.
func lineWith(s, prefix string) bool {
	for _, l := range lines(s) {
		if len(l) >= len(prefix) && l[:len(prefix)] == prefix {
			return true
		}
	}
	return false
}
