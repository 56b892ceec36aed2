package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient/localclienttest"
	"github.com/meshd/meshd/codes"
)

// revokeMeshd is a stand-in meshd serving the token routes: answer gets
// each revoke request's id; tokens, when set, answers GET /v0/tokens.
func revokeMeshd(t *testing.T, answer func(w http.ResponseWriter, id string), tokens []apitype.Token) (sock string, ids chan string) {
	t.Helper()
	ids = make(chan string, 8)
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+apitype.PathRevokeToken, func(w http.ResponseWriter, r *http.Request) {
		ids <- r.PathValue("id")
		answer(w, r.PathValue("id"))
	})
	mux.HandleFunc("GET "+apitype.PathTokens, func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, tokens)
	})
	return localclienttest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Host != apitype.Host {
			writeJSON(w, http.StatusForbidden, apitype.NewError(codes.PermissionDenied, nil))
			return
		}
		mux.ServeHTTP(w, r)
	})), ids
}

var revokedRow = apitype.Token{ID: "0123456789ab", Name: "w1", Role: "worker", Created: time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC),
	Expires: time.Date(2031, 1, 1, 0, 15, 0, 0, time.UTC), MintedBy: "n-origin", State: apitype.TokenRevoked,
	RevokedAt: time.Date(2031, 1, 1, 0, 5, 0, 0, time.UTC)}

func TestTokensRevokeUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"usage/no-id", []string{"tokens", "revoke"}},
		{"usage/two-ids", []string{"tokens", "revoke", "0123456789ab", "ba9876543210"}},
		{"usage/id-too-short", []string{"tokens", "revoke", "0123456"}},
		{"usage/id-too-long", []string{"tokens", "revoke", strings.Repeat("a", 65)}},
		{"usage/id-not-hex", []string{"tokens", "revoke", "0123456789xz"}},
		{"usage/id-is-a-token", []string{"tokens", "revoke", "mesh1_alpha_127.0.0.1:7300_ab_w1_worker"}},
		{"usage/bad-output", []string{"tokens", "revoke", "0123456789ab", "-o", "yaml"}},
		{"usage/unknown-flag", []string{"tokens", "revoke", "0123456789ab", "--force"}},
		{"usage/tokens-extra-arg", []string{"tokens", "0123456789ab"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The socket goes nowhere: reaching for the daemon would exit 3.
			r := meshctl(t, append([]string{"--socket", nowhere(t)}, tc.args...)...)
			if r.exit != exitUsage {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.exit, exitUsage, r.stdout, r.stderr)
			}
			if r.stdout != "" || r.stderr == "" {
				t.Fatalf("stdout %q, stderr %q: want the complaint on stderr only", r.stdout, r.stderr)
			}
			// A token pasted in place of its id is not echoed.
			if strings.Contains(r.stderr, "mesh1_") {
				t.Fatalf("stderr echoes the argument:\n%s", r.stderr)
			}
		})
	}
}

func TestTokensRevoke(t *testing.T) {
	ok := func(already bool) func(http.ResponseWriter, string) {
		return func(w http.ResponseWriter, _ string) {
			writeJSON(w, http.StatusOK, apitype.RevokeResponse{Token: revokedRow, AlreadyRevoked: already})
		}
	}
	t.Run("ok/table", func(t *testing.T) {
		sock, ids := revokeMeshd(t, ok(false), nil)
		r := meshctl(t, "--socket", sock, "tokens", "revoke", "0123456789ab")
		if r.exit != exitOK || r.stderr != "" {
			t.Fatalf("exit %d\nstderr:\n%s", r.exit, r.stderr)
		}
		if id := <-ids; id != "0123456789ab" {
			t.Fatalf("meshd was asked to revoke %q", id)
		}
		if !strings.Contains(r.stdout, "0123456789ab") || !strings.Contains(r.stdout, "revoked") || strings.Contains(r.stdout, "already") {
			t.Fatalf("stdout does not report the revocation:\n%s", r.stdout)
		}
	})
	t.Run("ok/prefix-passed-as-given", func(t *testing.T) {
		sock, ids := revokeMeshd(t, ok(false), nil)
		if r := meshctl(t, "--socket", sock, "tokens", "revoke", "0123ABCD"); r.exit != exitOK {
			t.Fatalf("exit %d\nstderr:\n%s", r.exit, r.stderr)
		}
		if id := <-ids; id != "0123ABCD" {
			t.Fatalf("meshd was asked to revoke %q", id)
		}
	})
	t.Run("ok/already", func(t *testing.T) {
		sock, _ := revokeMeshd(t, ok(true), nil)
		r := meshctl(t, "--socket", sock, "tokens", "revoke", "0123456789ab")
		if r.exit != exitOK || !strings.Contains(r.stdout, "already revoked") {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.exit, r.stdout, r.stderr)
		}
	})
	t.Run("ok/json", func(t *testing.T) {
		sock, _ := revokeMeshd(t, ok(false), nil)
		r := meshctl(t, "--socket", sock, "tokens", "revoke", "0123456789ab", "-o", "json")
		if r.exit != exitOK {
			t.Fatalf("exit %d\nstderr:\n%s", r.exit, r.stderr)
		}
		var got struct {
			Token          map[string]any `json:"token"`
			AlreadyRevoked *bool          `json:"already_revoked"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("stdout is not JSON (%v):\n%s", err, r.stdout)
		}
		if got.Token["id"] != "0123456789ab" || got.Token["state"] != "revoked" || got.Token["revoked_at"] != "2031-01-01T00:05:00Z" ||
			got.AlreadyRevoked != nil {
			t.Fatalf("JSON %s", r.stdout)
		}
	})
	for _, tc := range []struct {
		name string
		code codes.Code
	}{
		{"fail/unknown-id", codes.TokenUnknown},
		{"fail/ambiguous-id", codes.BadRequest},
		{"fail/used", codes.TokenConsumed},
		{"fail/worker", codes.NotControl},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock, _ := revokeMeshd(t, func(w http.ResponseWriter, id string) {
				writeJSON(w, tc.code.Status(), apitype.NewError(tc.code, errors.New("about "+id)))
			}, nil)
			for _, o := range []string{"table", "json"} {
				r := meshctl(t, "--socket", sock, "tokens", "revoke", "0123456789ab", "-o", o)
				checkFailure(t, r, exitFailure, tc.code)
				if r.stdout != "" || !strings.Contains(r.stderr, "detail: about 0123456789ab") {
					t.Fatalf("-o %s: stdout %q, stderr:\n%s", o, r.stdout, r.stderr)
				}
			}
		})
	}
	t.Run("fail/unreachable", func(t *testing.T) {
		r := meshctl(t, "--socket", nowhere(t), "tokens", "revoke", "0123456789ab")
		checkFailure(t, r, exitUnreachable, codes.DaemonUnreachable)
	})
}

// TestTokensShowsRevoked: `meshctl tokens` shows a revoked token's state,
// in the table and in JSON (with when).
func TestTokensShowsRevoked(t *testing.T) {
	sock, _ := revokeMeshd(t, nil, []apitype.Token{revokedRow})
	r := meshctl(t, "--socket", sock, "tokens")
	if r.exit != exitOK {
		t.Fatalf("exit %d\nstderr:\n%s", r.exit, r.stderr)
	}
	l := lines(r.stdout)
	if len(l) != 2 || !strings.HasPrefix(l[1], "0123456789ab") || strings.Fields(l[1])[3] != "revoked" {
		t.Fatalf("table:\n%s", r.stdout)
	}
	r = meshctl(t, "--socket", sock, "tokens", "-o", "json")
	var rows []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil || len(rows) != 1 {
		t.Fatalf("JSON (%v):\n%s", err, r.stdout)
	}
	if rows[0]["state"] != "revoked" || rows[0]["revoked_at"] != "2031-01-01T00:05:00Z" {
		t.Fatalf("row %v", rows[0])
	}
}
