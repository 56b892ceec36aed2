package enroll_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// revokingSeed answers the time with a revocation list of version v
// listing leaves, and an enrollment with NoLeader (it steps aside).
func revokingSeed(v int, leaves ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == enroll.TimePath {
			_ = json.NewEncoder(w).Encode(enroll.TimeResponse{ServerTime: pkitest.Now, Revocations: v, RevokedSeeds: leaves})
			return
		}
		w.WriteHeader(codes.NoLeader.Status())
		_ = json.NewEncoder(w).Encode(enroll.ErrorBody{Code: string(codes.NoLeader), Cause: "no leader"})
	}
}

// TestClientRefusesRevokedSeed (issue 52 item 3): a seed whose leaf the
// freshest revocation list the joiner has seen lists (a copy of a
// control node that left) gets nothing: codes.SeedRevoked, and the next
// seed is asked. On main the joiner sent the secret to any seed with a
// valid leaf of the pinned CA.
func TestClientRefusesRevokedSeed(t *testing.T) {
	c := newCluster(t)
	copyID := pkitest.NewIdentity(t, c.ca, "c3", pki.RoleControl, pkitest.IP(3))
	leaf, err := pki.ParseCertPEM(copyID.Cert)
	if err != nil {
		t.Fatal(err)
	}
	c3 := pki.FingerprintOf(leaf).String()
	for _, tc := range []struct {
		name    string
		current http.Handler // the token's first seed, if any
		copy    http.Handler // c3's copy, the token's last seed
	}{
		// A current seed tells the copy's leaf revoked, then steps aside.
		{name: "listed-by-a-current-seed", current: revokingSeed(5, c3), copy: revokingSeed(3)},
		// A copy whose state knows its own departure.
		{name: "listed-by-itself", copy: revokingSeed(5, c3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seeds []string
			if tc.current != nil {
				seeds = append(seeds, serve(t, pkitest.NewIdentity(t, c.ca, "c1", pki.RoleControl, pkitest.IP(1)), tc.current))
			}
			cp := &capture{h: tc.copy}
			seeds = append(seeds, serve(t, copyID, cp))
			req, _ := c.request(t, "w1")
			var st steps
			var logs bytes.Buffer
			d := clientDeps(&st, &logs)
			d.SeedBudget = 200 * time.Millisecond // the current seed steps aside busy: asked again within it
			_, err := enroll.Enroll(t.Context(), c.token(seeds...), req, d)
			if codes.Of(err) != codes.SeedRevoked {
				t.Fatalf("Enroll = %v (code %q), want %s\nsteps:\n%s", err, codes.Of(err), codes.SeedRevoked, &st)
			}
			if reqs, _ := cp.seen(); len(reqs) != 0 || slices.Contains(cp.asked(), enroll.Path) {
				t.Fatalf("the revoked seed was sent the request: %v", cp.asked())
			}
		})
	}
	// A seed listing another leaf is asked as before.
	cp := &capture{h: c.server()}
	seed := serve(t, copyID, revokingTime(cp, 7, "ffff"))
	req, _ := c.request(t, "w1")
	var st steps
	var logs bytes.Buffer
	if _, err := enroll.Enroll(t.Context(), c.token(seed), req, clientDeps(&st, &logs)); err != nil {
		t.Fatalf("a seed not listed: %v", err)
	}
}

// revokingTime is h with the time answer's revocation list set.
func revokingTime(h http.Handler, v int, leaves ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == enroll.TimePath {
			_ = json.NewEncoder(w).Encode(enroll.TimeResponse{ServerTime: pkitest.Now, Revocations: v, RevokedSeeds: leaves})
			return
		}
		h.ServeHTTP(w, r)
	}
}
