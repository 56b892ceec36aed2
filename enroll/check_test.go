package enroll_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// TestSkewJudge pins the skew arithmetic: the offset's sign, the bounds
// (more than max fails, more than 30 s warns, both inclusive of the
// bound), and that a refusal shows both clocks.
func TestSkewJudge(t *testing.T) {
	local := pkitest.Now
	tests := []struct {
		name   string
		remote time.Duration // the peer's clock minus ours
		max    time.Duration
		warn   bool
		want   codes.Code
	}{
		{name: "ok/equal", max: 5 * time.Minute},
		{name: "ok/30s-ahead", remote: 30 * time.Second, max: 5 * time.Minute},
		{name: "ok/30s-behind", remote: -30 * time.Second, max: 5 * time.Minute},
		{name: "warn/31s-ahead", remote: 31 * time.Second, max: 5 * time.Minute, warn: true},
		{name: "warn/at-max", remote: -5 * time.Minute, max: 5 * time.Minute, warn: true},
		{name: "fail/past-max-ahead", remote: 5*time.Minute + time.Millisecond, max: 5 * time.Minute, want: codes.ClockSkew},
		{name: "fail/past-max-behind", remote: -5*time.Minute - time.Millisecond, max: 5 * time.Minute, want: codes.ClockSkew},
		{name: "fail/small-max", remote: 10 * time.Second, max: 5 * time.Second, want: codes.ClockSkew},
		{name: "ok/under-small-max", remote: 5 * time.Second, max: 10 * time.Second},
		{name: "ok/at-small-max", remote: 10 * time.Second, max: 10 * time.Second},
		{name: "fail/above-small-max", remote: 11 * time.Second, max: 10 * time.Second, want: codes.ClockSkew},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sk := enroll.Skew{Peer: "seed 192.0.2.1:7300", Local: local, Remote: local.Add(tt.remote)}
			if sk.Offset() != tt.remote {
				t.Fatalf("Offset = %s, want %s", sk.Offset(), tt.remote)
			}
			warn, err := sk.Judge(tt.max)
			if got := codes.Of(err); got != tt.want || (err == nil && warn != tt.warn) {
				t.Fatalf("Judge(%s) = %v, %v (code %q), want warn %v code %q", tt.max, warn, err, got, tt.warn, tt.want)
			}
			if err != nil {
				for _, s := range []string{local.UTC().Format(time.RFC3339), local.Add(tt.remote).UTC().Format(time.RFC3339), "192.0.2.1:7300"} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("refusal %q does not show %s", err, s)
					}
				}
			}
		})
	}
	ahead := enroll.Skew{Peer: "seed s", Local: local.Add(time.Minute), Remote: local}
	if !strings.Contains(ahead.String(), "this machine's clock is ahead by 1m0s") {
		t.Errorf("String = %q", ahead)
	}
	behind := enroll.Skew{Peer: "seed s", Local: local, Remote: local.Add(time.Minute)}
	if !strings.Contains(behind.String(), "this machine's clock is behind by 1m0s") {
		t.Errorf("String = %q", behind)
	}
}

// TestServerCheck: Check runs Enroll's checks and answers with the
// ledger's facts, asking the ledger only Token and NameTaken: nothing is
// admitted, signed or recorded, and a consumed token is never resumed.
func TestServerCheck(t *testing.T) {
	tests := []struct {
		name string
		edit func(c *cluster, req *enroll.CheckRequest)
		want codes.Code
	}{
		{name: "ok/unused"},
		{name: "fail/protocol", edit: func(_ *cluster, r *enroll.CheckRequest) { r.Protocol = 2 }, want: codes.EnrollRejected},
		{name: "fail/unknown-secret", edit: func(_ *cluster, r *enroll.CheckRequest) { r.Secret, _ = enroll.NewSecret() }, want: codes.TokenUnknown},
		{name: "fail/no-secret", edit: func(_ *cluster, r *enroll.CheckRequest) { r.Secret = enroll.Secret{} }, want: codes.TokenUnknown},
		{name: "fail/consumed", edit: func(c *cluster, _ *enroll.CheckRequest) { c.rec.ConsumedAt, c.rec.ConsumedBy = pkitest.Now, "node-w1" }, want: codes.TokenConsumed},
		{name: "fail/revoked", edit: func(c *cluster, _ *enroll.CheckRequest) { c.rec.RevokedAt = pkitest.Now }, want: codes.TokenRevoked},
		{name: "fail/expired", edit: func(c *cluster, _ *enroll.CheckRequest) { c.rec.Expires = pkitest.Now }, want: codes.TokenExpired},
		{name: "fail/wrong-addr", edit: func(c *cluster, _ *enroll.CheckRequest) { c.rec.Addr = "192.0.2.1" }, want: codes.TokenWrongAddr},
		{name: "fail/name-differ", edit: func(_ *cluster, r *enroll.CheckRequest) { r.Name = "w2" }, want: codes.TokenNameDiffer},
		{name: "fail/name-taken", edit: func(c *cluster, _ *enroll.CheckRequest) {
			c.ledger.nameTaken = func(string) (bool, error) { return true, nil }
		}, want: codes.NameTaken},
		{name: "fail/clock-skew", edit: func(_ *cluster, r *enroll.CheckRequest) { r.Clock = pkitest.Now.Add(time.Hour) }, want: codes.ClockSkew},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			req := enroll.CheckRequest{Protocol: enroll.ProtocolVersion, Secret: c.secret, Name: "w1", Clock: pkitest.Now, Expires: c.rec.Expires}
			if tt.edit != nil {
				tt.edit(c, &req)
			}
			resp, err := c.server().Check(t.Context(), req, netip.MustParseAddr("127.0.0.1"))
			if got := codes.Of(err); got != tt.want {
				t.Fatalf("Check = %v (code %q), want %q", err, got, tt.want)
			}
			for _, call := range c.ledger.Calls() {
				if call != "Token" && call != "NameTaken" {
					t.Errorf("Check called the ledger's %s: %v", call, c.ledger.Calls())
				}
			}
			if len(c.ledger.Admitted()) != 0 {
				t.Errorf("Check admitted %v", c.ledger.Admitted())
			}
			if tt.want == "" && (resp.Name != "w1" || resp.Role != pki.RoleWorker || !resp.Expires.Equal(c.rec.Expires) || resp.ServerTime.IsZero()) {
				t.Errorf("Check = %+v", resp)
			}
		})
	}
}

// TestServerCheckThrottled: failed checks count against the same
// throttle as enrollments, and a throttled source is refused both.
func TestServerCheckThrottled(t *testing.T) {
	c := newCluster(t)
	cfg := enroll.DefaultServerConfig()
	cfg.FailLimit = 3
	srv := enroll.NewServer(cfg, c.ledger, c.signer, c.deps)
	src := netip.MustParseAddr("192.0.2.9")
	wrong, _ := enroll.NewSecret()
	for range 3 {
		_, err := srv.Check(t.Context(), enroll.CheckRequest{Protocol: enroll.ProtocolVersion, Secret: wrong, Name: "w1", Clock: pkitest.Now}, src)
		if codes.Of(err) != codes.TokenUnknown {
			t.Fatalf("check with a wrong secret = %v", err)
		}
	}
	good := enroll.CheckRequest{Protocol: enroll.ProtocolVersion, Secret: c.secret, Name: "w1", Clock: pkitest.Now}
	if _, err := srv.Check(t.Context(), good, src); codes.Of(err) != codes.TokenThrottled {
		t.Fatalf("check after 3 failures = %v, want %s", err, codes.TokenThrottled)
	}
	req, _ := c.request(t, "w1")
	if _, err := srv.Enroll(t.Context(), req, src); codes.Of(err) != codes.TokenThrottled {
		t.Fatalf("enroll after 3 failed checks = %v, want %s", err, codes.TokenThrottled)
	}
	if _, err := srv.Check(t.Context(), good, netip.MustParseAddr("192.0.2.10")); err != nil {
		t.Fatalf("another source: %v", err)
	}
}

// TestServeHTTPCheckAndTime: the check and time endpoints over HTTP, and
// the methods each one takes.
func TestServeHTTPCheckAndTime(t *testing.T) {
	c := newCluster(t)
	srv := c.server()
	do := func(method, path string, body any) *httptest.ResponseRecorder {
		var b bytes.Buffer
		if body != nil {
			_ = json.NewEncoder(&b).Encode(body)
		}
		r := httptest.NewRequest(method, path, &b)
		r.RemoteAddr = "127.0.0.1:50000"
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		return w
	}
	w := do(http.MethodGet, enroll.TimePath, nil)
	var tr enroll.TimeResponse
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &tr) != nil || !tr.ServerTime.Equal(pkitest.Now) {
		t.Fatalf("GET %s = %d %s", enroll.TimePath, w.Code, w.Body)
	}
	w = do(http.MethodPost, enroll.CheckPath, enroll.CheckRequest{Protocol: enroll.ProtocolVersion, Secret: c.secret, Name: "w1", Clock: pkitest.Now})
	var cr enroll.CheckResponse
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &cr) != nil || cr.Name != "w1" {
		t.Fatalf("POST %s = %d %s", enroll.CheckPath, w.Code, w.Body)
	}
	c.rec.ConsumedAt = pkitest.Now
	w = do(http.MethodPost, enroll.CheckPath, enroll.CheckRequest{Protocol: enroll.ProtocolVersion, Secret: c.secret, Name: "w1", Clock: pkitest.Now})
	var eb enroll.ErrorBody
	if _ = json.Unmarshal(w.Body.Bytes(), &eb); w.Code != codes.TokenConsumed.Status() || eb.Code != string(codes.TokenConsumed) {
		t.Fatalf("check of a used token = %d %s", w.Code, w.Body)
	}
	for _, m := range []struct{ method, path string }{{http.MethodPost, enroll.TimePath}, {http.MethodGet, enroll.CheckPath}} {
		if w := do(m.method, m.path, nil); w.Code != http.StatusMethodNotAllowed {
			t.Errorf("%s %s = %d, want 405", m.method, m.path, w.Code)
		}
	}
	if slices.Contains(c.ledger.Calls(), "Admit") {
		t.Errorf("the check endpoints admitted: %v", c.ledger.Calls())
	}
}

// TestClientCheckAndProbe: the joiner's side of a plan. ProbeSeeds reports
// each seed (unreachable, pinned to another CA, good with its clock) and
// sends nothing to any; Check asks a pinned seed and comes back with the
// ledger's answer, or with codes.ClockSkew before the secret is sent.
func TestClientCheckAndProbe(t *testing.T) {
	c := newCluster(t)
	cap := &capture{h: c.server()}
	good := serve(t, pkitest.NewIdentity(t, c.ca, "origin", pki.RoleControl, pkitest.IP(1)), cap)
	other := newCluster(t)
	otherCap := &capture{h: other.server()}
	foreign := serve(t, pkitest.NewIdentity(t, other.ca, "origin", pki.RoleControl, pkitest.IP(2)), otherCap)
	dead := deadAddr(t)
	tok := c.token(dead, foreign, good)
	var st steps
	var logs bytes.Buffer
	deps := clientDeps(&st, &logs)

	rs := enroll.ProbeSeeds(t.Context(), tok, deps)
	if len(rs) != 3 {
		t.Fatalf("%d reports for 3 seeds", len(rs))
	}
	for i, want := range []codes.Code{codes.SeedsUnreachable, codes.CAMismatch, ""} {
		if got := codes.Of(rs[i].Err); got != want {
			t.Errorf("seed %s: %v (code %q), want %q", rs[i].Seed, rs[i].Err, got, want)
		}
	}
	if r := rs[2]; !r.HasClock || !r.Skew.Remote.Equal(pkitest.Now) || r.Role != pki.RoleControl || !r.Local.IsLoopback() {
		t.Errorf("good seed: %+v", r)
	}
	if reqs, _ := cap.seen(); len(reqs) != 0 || len(otherCap.asked()) != 0 {
		t.Fatalf("probing sent requests: %v to the good seed, %v to the foreign one", cap.asked(), otherCap.asked())
	}
	if got := cap.asked(); !slices.Equal(got, []string{enroll.TimePath}) {
		t.Errorf("the good seed was asked %v, want only its time", got)
	}

	resp, err := enroll.Check(t.Context(), tok, good, deps)
	if err != nil || resp.Name != "w1" || resp.Role != pki.RoleWorker {
		t.Fatalf("Check = %+v, %v", resp, err)
	}
	if _, err := enroll.Check(t.Context(), tok, foreign, deps); codes.Of(err) != codes.CAMismatch {
		t.Fatalf("Check through a seed of another CA = %v, want %s", err, codes.CAMismatch)
	}
	if _, err := enroll.Check(t.Context(), tok, dead, deps); codes.Of(err) != codes.SeedsUnreachable {
		t.Fatalf("Check through a dead seed = %v, want %s", err, codes.SeedsUnreachable)
	}
	skewed := deps
	skewed.Now = func() time.Time { return pkitest.Now.Add(10 * time.Minute) }
	before := len(cap.asked())
	if _, err := enroll.Check(t.Context(), tok, good, skewed); codes.Of(err) != codes.ClockSkew {
		t.Fatalf("Check with a clock 10 minutes fast = %v, want %s", err, codes.ClockSkew)
	}
	if got := cap.asked()[before:]; !slices.Equal(got, []string{enroll.TimePath}) {
		t.Errorf("a skewed check asked %v, want only the time (the secret not sent)", got)
	}
	c.rec.ConsumedAt = pkitest.Now
	if _, err := enroll.Check(t.Context(), tok, good, deps); codes.Of(err) != codes.TokenConsumed {
		t.Fatalf("Check of a used token = %v, want %s", err, codes.TokenConsumed)
	}
	if slices.Contains(c.ledger.Calls(), "Admit") {
		t.Errorf("checks admitted: %v", c.ledger.Calls())
	}
}

// TestProbeSeedSTUNPort: a seed tells the STUN port it serves with its
// clock (TimeResponse.STUNPort), and ProbeSeed reports it; a seed that
// does not tell it (a release without the responder; here a server
// configured without it) reports 0, which the path check reads as "does
// not serve STUN".
func TestProbeSeedSTUNPort(t *testing.T) {
	c := newCluster(t)
	cfg := enroll.DefaultServerConfig()
	cfg.STUNPort = 3478
	serves := serve(t, pkitest.NewIdentity(t, c.ca, "origin", pki.RoleControl, pkitest.IP(1)),
		enroll.NewServer(cfg, c.ledger, c.signer, c.deps))
	silent := serve(t, pkitest.NewIdentity(t, c.ca, "c2", pki.RoleControl, pkitest.IP(2)), c.server())
	tok := c.token(serves, silent)
	var st steps
	var logs bytes.Buffer
	deps := clientDeps(&st, &logs)
	if r := enroll.ProbeSeed(t.Context(), tok, serves, deps); r.Err != nil || !r.HasClock || r.STUNPort != 3478 {
		t.Errorf("seed serving STUN: %+v, want no error, its clock and STUN port 3478", r)
	}
	if r := enroll.ProbeSeed(t.Context(), tok, silent, deps); r.Err != nil || !r.HasClock || r.STUNPort != 0 {
		t.Errorf("seed not telling a STUN port: %+v, want no error, its clock and STUN port 0", r)
	}
	cfg.STUNPort = 70000
	if err := cfg.Validate(); codes.Of(err) != codes.ConfigInvalid {
		t.Errorf("Validate with STUN port 70000 = %v, want %s", err, codes.ConfigInvalid)
	}
}
