package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient/localclienttest"
	"github.com/meshd/meshd/codes"
)

const joinTok = "mesh1_0123456789abcdef0123456789abcdef_alpha_c0ffee"

// joinDaemon answers POST /v0/join with a step and a result, and records
// every request it is sent.
func joinDaemon(t *testing.T) (string, chan apitype.JoinRequest) {
	t.Helper()
	reqs := make(chan apitype.JoinRequest, 8)
	sock := localclienttest.Serve(t, &fakeMeshd{join: func(w http.ResponseWriter, r *http.Request) {
		var req apitype.JoinRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			writeJSON(w, http.StatusBadRequest, apitype.NewError(codes.BadRequest, err))
			return
		}
		reqs <- req
		enc := json.NewEncoder(w)
		_ = enc.Encode(apitype.JoinLine{Step: "seed verified"})
		_ = enc.Encode(apitype.JoinLine{Result: &apitype.JoinResult{Cluster: "alpha", Node: "w1", Role: "worker", OverlayIP: "10.42.0.2"}})
	}})
	return sock, reqs
}

// writeTokenFile writes content to a new file with exactly mode perm
// (whatever the umask) and returns its path.
func writeTokenFile(t *testing.T, content string, perm os.FileMode) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "w1.token")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, perm); err != nil {
		t.Fatal(err)
	}
	return path
}

// withFile replaces FILE in args with path.
func withFile(args []string, path string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = strings.ReplaceAll(a, "FILE", path)
	}
	return out
}

// TestJoinTokenFile: a token given as an argument, in a file or on stdin
// reaches meshd the same, trimmed; a group- or world-readable file is
// used with a one-line warning; the token is never printed.
func TestJoinTokenFile(t *testing.T) {
	long := strings.Repeat("a", maxTokenFile)
	tests := []struct {
		name     string
		args     []string
		file     string // written to FILE when set
		perm     os.FileMode
		stdin    string
		want     apitype.JoinRequest
		wantWarn bool
	}{
		{name: "ok/argument", args: []string{"join", joinTok}, want: apitype.JoinRequest{Token: joinTok}},
		{name: "ok/argument-padded", args: []string{"join", " " + joinTok + "\n"}, want: apitype.JoinRequest{Token: joinTok}},
		{name: "ok/file", args: []string{"join", "--token-file", "FILE"}, file: "\n  " + joinTok + " \r\n\t", perm: 0o600,
			want: apitype.JoinRequest{Token: joinTok}},
		{name: "ok/file-equals-form", args: []string{"join", "--token-file=FILE"}, file: joinTok + "\n", perm: 0o400,
			want: apitype.JoinRequest{Token: joinTok}},
		{name: "ok/file-with-flags", args: []string{"join", "--advertise-addr", "192.0.2.7", "--token-file", "FILE", "--force"},
			file: joinTok, perm: 0o600, want: apitype.JoinRequest{Token: joinTok, AdvertiseAddr: "192.0.2.7", Force: true}},
		{name: "ok/stdin", args: []string{"join", "--token-file", "-"}, stdin: joinTok + "\n", want: apitype.JoinRequest{Token: joinTok}},
		{name: "ok/file-at-size-limit", args: []string{"join", "--token-file", "FILE"}, file: long, perm: 0o600,
			want: apitype.JoinRequest{Token: long}},
		{name: "warn/group-readable", args: []string{"join", "--token-file", "FILE"}, file: joinTok, perm: 0o640,
			want: apitype.JoinRequest{Token: joinTok}, wantWarn: true},
		{name: "warn/world-readable", args: []string{"join", "--token-file", "FILE"}, file: joinTok, perm: 0o604,
			want: apitype.JoinRequest{Token: joinTok}, wantWarn: true},
		// A join by identity: the JWT from the file, the seed and the pin as given.
		{name: "ok/jwt-file", args: []string{"join", "--jwt-file", "FILE", "--seed", "192.0.2.1:7300", "--ca-sha256", "ab12", "--ephemeral"},
			file: " hdr.payload.sig\n", perm: 0o600,
			want: apitype.JoinRequest{JWT: "hdr.payload.sig", Seed: "192.0.2.1:7300", CASHA256: "ab12", Ephemeral: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock, reqs := joinDaemon(t)
			path := ""
			if tt.file != "" {
				path = writeTokenFile(t, tt.file, tt.perm)
			}
			r := meshctlIn(t, tt.stdin, append([]string{"--socket", sock}, withFile(tt.args, path)...)...)
			if r.exit != exitOK {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.exit, r.stdout, r.stderr)
			}
			select {
			case got := <-reqs:
				if got != tt.want {
					t.Errorf("meshd got %+v, want %+v", got, tt.want)
				}
			default:
				t.Fatal("meshd saw no join request")
			}
			if secret := strings.TrimSpace(tt.want.Token + tt.want.JWT); strings.Contains(r.stdout+r.stderr, secret) {
				t.Errorf("the token is printed:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			}
			l := lines(r.stderr)
			switch {
			case tt.wantWarn && (len(l) != 1 || !strings.HasPrefix(l[0], "warning") || !strings.Contains(l[0], path)):
				t.Errorf("stderr %q, want one warning line naming %s", r.stderr, path)
			case !tt.wantWarn && len(l) != 0:
				t.Errorf("stderr %q, want nothing", r.stderr)
			}
		})
	}
}

// TestJoinTokenUsage: both or neither of TOKEN and --token-file, or a token
// file that is missing, empty, a directory or too big, exit 2 before meshd
// is asked anything, and never echo what the file held.
func TestJoinTokenUsage(t *testing.T) {
	const secret = "mesh1_SECRETSECRETSECRET_alpha_0000\n"
	oversize := strings.Repeat(secret, maxTokenFile/len(secret)+1)[:maxTokenFile+1]
	tests := []struct {
		name  string
		args  []string
		file  *string // written to FILE when set; otherwise FILE is a path that does not exist
		stdin string
	}{
		{name: "usage/both", args: []string{"join", joinTok, "--token-file", "FILE"}, file: ptr(secret)},
		{name: "usage/both-stdin", args: []string{"join", "--token-file", "-", joinTok}, stdin: secret},
		{name: "usage/neither", args: []string{"join"}},
		{name: "usage/neither-with-flags", args: []string{"join", "--force", "--advertise-addr", "192.0.2.7"}},
		{name: "usage/token-file-without-path", args: []string{"join", "--token-file", ""}},
		{name: "usage/two-tokens", args: []string{"join", joinTok, joinTok}},
		{name: "usage/missing-file", args: []string{"join", "--token-file", "FILE"}},
		{name: "usage/directory", args: []string{"join", "--token-file", "DIR"}},
		{name: "usage/empty-file", args: []string{"join", "--token-file", "FILE"}, file: ptr("")},
		{name: "usage/blank-file", args: []string{"join", "--token-file", "FILE"}, file: ptr(" \n\t\r\n")},
		{name: "usage/oversize-file", args: []string{"join", "--token-file", "FILE"}, file: ptr(oversize)},
		{name: "usage/empty-stdin", args: []string{"join", "--token-file", "-"}},
		{name: "usage/blank-stdin", args: []string{"join", "--token-file", "-"}, stdin: "\n\n"},
		{name: "usage/oversize-stdin", args: []string{"join", "--token-file", "-"}, stdin: oversize},
		{name: "usage/jwt-and-token", args: []string{"join", joinTok, "--jwt-file", "FILE"}, file: ptr(secret)},
		{name: "usage/jwt-and-plan", args: []string{"join", "--plan", "--jwt-file", "FILE"}, file: ptr(secret)},
		{name: "usage/jwt-empty", args: []string{"join", "--jwt-file", "FILE"}, file: ptr("\n")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock, reqs := joinDaemon(t)
			dir := t.TempDir()
			path := filepath.Join(dir, "no-such.token")
			if tt.file != nil {
				path = writeTokenFile(t, *tt.file, 0o600)
			}
			args := withFile(tt.args, path)
			for i := range args {
				args[i] = strings.ReplaceAll(args[i], "DIR", dir)
			}
			r := meshctlIn(t, tt.stdin, append([]string{"--socket", sock}, args...)...)
			if r.exit != exitUsage {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.exit, exitUsage, r.stdout, r.stderr)
			}
			if r.stdout != "" || r.stderr == "" {
				t.Errorf("stdout %q, stderr %q: want the complaint on stderr only", r.stdout, r.stderr)
			}
			for _, s := range []string{"SECRET", joinTok} {
				if strings.Contains(r.stderr, s) {
					t.Errorf("stderr echoes the token or the file's content:\n%s", r.stderr)
				}
			}
			select {
			case got := <-reqs:
				t.Errorf("meshd was sent a join (%d-byte token)", len(got.Token))
			default:
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestJoinCompletion: shell completion offers files for --token-file and
// nothing for the TOKEN argument, which is pasted.
func TestJoinCompletion(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string // the directive line cobra's __complete ends with
	}{
		{"ok/token-file-completes-files", []string{"__complete", "join", "--token-file", ""}, ":0"},
		{"ok/token-argument-completes-nothing", []string{"__complete", "join", ""}, ":4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := meshctl(t, tt.args...)
			l := lines(r.stdout)
			if r.exit != exitOK || len(l) == 0 || l[len(l)-1] != tt.want {
				t.Fatalf("exit %d, stdout %q: want the directive %s last", r.exit, r.stdout, tt.want)
			}
		})
	}
}
