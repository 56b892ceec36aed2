package enroll_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki/pkitest"
)

// fakeClock is a Deps.Now that moves only when told.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time          { return c.t }
func (c *fakeClock) Advance(d time.Duration) { c.t = c.t.Add(d) }

// throttled builds c's server with the throttle cfg sets and a clock the
// test moves.
func (c *cluster) throttled(cfg enroll.ServerConfig, log *bytes.Buffer) (*enroll.Server, *fakeClock) {
	clock := &fakeClock{t: pkitest.Now}
	c.deps.Now = clock.Now
	if log != nil {
		c.deps.Log = slog.New(slog.NewJSONHandler(log, nil))
	}
	return enroll.NewServer(cfg, c.ledger, c.signer, c.deps), clock
}

// badRequest is a request with a fresh secret the cluster never minted
// (the keys are made once per cluster: they cost more than the test).
func badRequest(t *testing.T, c *cluster) enroll.Request {
	t.Helper()
	if c.base == nil {
		req, _ := c.request(t, "w1")
		c.base = &req
	}
	req := *c.base
	req.Secret, _ = enroll.NewSecret()
	return req
}

func countCalls(calls []string, name string) int {
	n := 0
	for _, c := range calls {
		if c == name {
			n++
		}
	}
	return n
}

// TestThrottle: a source that has failed FailLimit times is refused with
// TokenThrottled before the ledger is asked, even with a good token; other
// sources are not; once its window has passed it may try again.
func TestThrottle(t *testing.T) {
	c := newCluster(t)
	srv, clock := c.throttled(enroll.DefaultServerConfig(), nil)
	bad, other := netip.MustParseAddr("192.0.2.7"), netip.MustParseAddr("192.0.2.8")
	limit := enroll.DefaultFailLimit

	for i := range limit + 5 {
		_, err := srv.Enroll(t.Context(), badRequest(t, c), bad)
		want := codes.TokenUnknown
		if i >= limit {
			want = codes.TokenThrottled
		}
		if got := codes.Of(err); got != want {
			t.Fatalf("attempt %d: code %q (%v), want %s", i+1, got, err, want)
		}
		clock.Advance(time.Second)
	}
	if n := countCalls(c.ledger.Calls(), "Token"); n != limit {
		t.Fatalf("the ledger saw %d token lookups, want %d (the limit)", n, limit)
	}
	// A good token from the throttled source is refused unchecked too.
	good, _ := c.request(t, "w1")
	if _, err := srv.Enroll(t.Context(), good, bad); codes.Of(err) != codes.TokenThrottled {
		t.Fatalf("good token from a throttled source: %v, want %s", err, codes.TokenThrottled)
	}
	if n := len(c.ledger.Calls()); n != limit {
		t.Fatalf("the ledger was called for a throttled source: %v", c.ledger.Calls())
	}
	// Another source is unaffected: its bad token is judged, its good one admitted.
	if _, err := srv.Enroll(t.Context(), badRequest(t, c), other); codes.Of(err) != codes.TokenUnknown {
		t.Fatalf("other source, bad token: %v, want %s", err, codes.TokenUnknown)
	}
	if _, err := srv.Enroll(t.Context(), good, other); err != nil {
		t.Fatalf("other source, good token: %v", err)
	}
	// The window opened at the first failure; just before it closes the
	// source is still refused, once it has closed it is judged again.
	clock.t = pkitest.Now.Add(enroll.DefaultFailWindow - time.Nanosecond)
	if _, err := srv.Enroll(t.Context(), badRequest(t, c), bad); codes.Of(err) != codes.TokenThrottled {
		t.Fatalf("before the window closed: %v, want %s", err, codes.TokenThrottled)
	}
	clock.t = pkitest.Now.Add(enroll.DefaultFailWindow)
	if _, err := srv.Enroll(t.Context(), badRequest(t, c), bad); codes.Of(err) != codes.TokenUnknown {
		t.Fatalf("after the window: %v, want %s", err, codes.TokenUnknown)
	}
	// A fresh window: one failure so far, so limit-1 more are judged.
	for i := range limit - 1 {
		if _, err := srv.Enroll(t.Context(), badRequest(t, c), bad); codes.Of(err) != codes.TokenUnknown {
			t.Fatalf("new window, attempt %d: %v, want %s", i+2, err, codes.TokenUnknown)
		}
	}
	if _, err := srv.Enroll(t.Context(), badRequest(t, c), bad); codes.Of(err) != codes.TokenThrottled {
		t.Fatalf("new window, attempt %d: %v, want %s", limit+1, err, codes.TokenThrottled)
	}
}

// TestThrottleHTTP: over HTTP a throttled source gets 429 with the code,
// before its body is read (a body that would be refused otherwise), and
// 2,000 bad attempts log one throttle line per window, not one per
// attempt.
func TestThrottleHTTP(t *testing.T) {
	c := newCluster(t)
	var logs bytes.Buffer
	srv, clock := c.throttled(enroll.DefaultServerConfig(), &logs)
	post := func(body []byte, remote string) *httptest.ResponseRecorder {
		r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, enroll.Path, bytes.NewReader(body))
		r.RemoteAddr = remote
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		return w
	}
	code := func(w *httptest.ResponseRecorder) codes.Code {
		var eb enroll.ErrorBody
		_ = json.Unmarshal(w.Body.Bytes(), &eb)
		return codes.Code(eb.Code)
	}
	body, _ := json.Marshal(badRequest(t, c))
	attempts := func(n int) (throttled int) {
		for range n {
			w := post(body, "192.0.2.7:40000")
			if code(w) == codes.TokenThrottled {
				throttled++
				if w.Code != http.StatusTooManyRequests {
					t.Fatalf("throttled with status %d, want 429", w.Code)
				}
			}
		}
		return throttled
	}
	throttleLines := func() (lines, throttle int) {
		for _, r := range logRecords(t, logs.Bytes()) {
			lines++
			if r["code"] == string(codes.TokenThrottled) {
				throttle++
				if r["level"] != "WARN" || r["source"] != "192.0.2.7" {
					t.Errorf("throttle line %v, want a WARN naming the source", r)
				}
			}
		}
		return lines, throttle
	}

	if n := attempts(2000); n != 2000-enroll.DefaultFailLimit {
		t.Fatalf("%d of 2000 attempts throttled, want %d", n, 2000-enroll.DefaultFailLimit)
	}
	lines, throttle := throttleLines()
	if throttle != 1 || lines != enroll.DefaultFailLimit+1 {
		t.Fatalf("%d log lines, %d of them about the throttle; want %d and 1:\n%s", lines, throttle, enroll.DefaultFailLimit+1, &logs)
	}
	// Throttled before the body is looked at: garbage is 429, not 400.
	if w := post([]byte("{"), "192.0.2.7:40001"); code(w) != codes.TokenThrottled {
		t.Fatalf("garbage from a throttled source: %d %s", w.Code, w.Body)
	}
	if n := countCalls(c.ledger.Calls(), "Token"); n != enroll.DefaultFailLimit {
		t.Fatalf("the ledger saw %d lookups, want %d", n, enroll.DefaultFailLimit)
	}
	// The next window has its own throttle line.
	clock.Advance(enroll.DefaultFailWindow)
	attempts(2000)
	if _, throttle := throttleLines(); throttle != 2 {
		t.Fatalf("%d throttle lines after two windows, want 2:\n%s", throttle, &logs)
	}
}

// TestThrottleCounts pins which refusals count as failed token attempts:
// the caller's faults about the token do; faults of this node, of the
// cluster, or in the rest of the request do not. With a limit of one, a
// counted failure throttles the next attempt.
func TestThrottleCounts(t *testing.T) {
	noLeader := codes.Wrap(codes.NoLeader, errors.New("no leader"))
	tests := []struct {
		name    string
		edit    func(c *cluster, req *enroll.Request)
		body    func(body []byte) []byte // over HTTP when set
		want    codes.Code
		counted bool
	}{
		{name: "counted/unknown", edit: func(_ *cluster, r *enroll.Request) { r.Secret, _ = enroll.NewSecret() }, want: codes.TokenUnknown, counted: true},
		{name: "counted/consumed", edit: func(c *cluster, _ *enroll.Request) { c.rec.ConsumedAt = pkitest.Now }, want: codes.TokenConsumed, counted: true},
		{name: "counted/expired", edit: func(c *cluster, _ *enroll.Request) { c.rec.Expires = pkitest.Now }, want: codes.TokenExpired, counted: true},
		{name: "counted/revoked", edit: func(c *cluster, _ *enroll.Request) { c.rec.RevokedAt = pkitest.Now }, want: codes.TokenRevoked, counted: true},
		{name: "counted/wrong-addr", edit: func(c *cluster, _ *enroll.Request) { c.rec.Addr = "192.0.2.1" }, want: codes.TokenWrongAddr, counted: true},
		{name: "counted/name-differ", edit: func(c *cluster, _ *enroll.Request) { c.rec.Name = "w2" }, want: codes.TokenNameDiffer, counted: true},
		{name: "counted/bad-secret", body: func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"secret":"`), []byte(`"secret":"AAAA`), 1)
		}, want: codes.EnrollRejected, counted: true},
		{name: "counted/secret-not-a-string", body: func(b []byte) []byte {
			var m map[string]any
			_ = json.Unmarshal(b, &m)
			m["secret"] = 7
			b, _ = json.Marshal(m)
			return b
		}, want: codes.EnrollRejected, counted: true},
		{name: "not/ok"},
		{name: "not/bad-json", body: func([]byte) []byte { return []byte("{") }, want: codes.EnrollRejected},
		{name: "not/protocol", edit: func(_ *cluster, r *enroll.Request) { r.Protocol = 2 }, want: codes.EnrollRejected},
		{name: "not/bad-name", edit: func(_ *cluster, r *enroll.Request) { r.Name = "W_1" }, want: codes.BadNodeName},
		{name: "not/name-taken", edit: func(c *cluster, _ *enroll.Request) {
			c.ledger.nameTaken = func(string) (bool, error) { return true, nil }
		}, want: codes.NameTaken},
		{name: "not/no-leader", edit: func(c *cluster, _ *enroll.Request) {
			c.ledger.token = func(enroll.TokenHash) (enroll.TokenRecord, bool, error) { return enroll.TokenRecord{}, false, noLeader }
		}, want: codes.NoLeader},
		{name: "not/ca-holder-down", edit: func(c *cluster, _ *enroll.Request) {
			c.signer.signTLS = func(enroll.SignRequest) ([]byte, error) {
				return nil, codes.Wrap(codes.CAHolderDown, errors.New("origin unreachable"))
			}
		}, want: codes.CAHolderDown},
		{name: "not/internal", edit: func(c *cluster, _ *enroll.Request) {
			c.ledger.nameTaken = func(string) (bool, error) { return false, errors.New("disk on fire") }
		}, want: codes.Internal},
		{name: "not/bad-csr", edit: func(_ *cluster, r *enroll.Request) { r.CSR = []byte("x") }, want: codes.EnrollRejected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			cfg := enroll.DefaultServerConfig()
			cfg.FailLimit = 1
			srv, _ := c.throttled(cfg, nil)
			req, _ := c.request(t, "w1")
			if tt.edit != nil {
				tt.edit(c, &req)
			}
			source := netip.MustParseAddr("192.0.2.7")
			attempt := func() codes.Code {
				if tt.body == nil {
					if _, err := srv.Enroll(t.Context(), req, source); err != nil {
						return codes.OrInternal(err)
					}
					return ""
				}
				b, _ := json.Marshal(req)
				r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, enroll.Path, bytes.NewReader(tt.body(b)))
				r.RemoteAddr = "192.0.2.7:40000"
				w := httptest.NewRecorder()
				srv.ServeHTTP(w, r)
				var eb enroll.ErrorBody
				_ = json.Unmarshal(w.Body.Bytes(), &eb)
				return codes.Code(eb.Code)
			}
			if got := attempt(); got != tt.want {
				t.Fatalf("first attempt: code %q, want %q", got, tt.want)
			}
			c.rec.ConsumedAt = time.Time{} // a success consumed it: judge the second attempt the same way
			second := attempt()
			if throttled := second == codes.TokenThrottled; throttled != tt.counted {
				t.Fatalf("second attempt: code %q; counted %v, want %v", second, throttled, tt.counted)
			}
			if wantSize := map[bool]int{true: 1}[tt.counted]; srv.ThrottledSources() != wantSize {
				t.Errorf("%d sources tracked, want %d", srv.ThrottledSources(), wantSize)
			}
		})
	}
}

// TestThrottleSources: IPv4-mapped addresses count as their IPv4 address,
// IPv6 addresses by their /64, IPv4 addresses one by one.
func TestThrottleSources(t *testing.T) {
	tests := []struct {
		name        string
		first, then string
		same        bool
	}{
		{name: "same/ipv4", first: "192.0.2.7", then: "192.0.2.7", same: true},
		{name: "same/ipv4-mapped", first: "::ffff:192.0.2.7", then: "192.0.2.7", same: true},
		{name: "same/ipv6-64", first: "2001:db8:1:2::1", then: "2001:db8:1:2:ffff::9", same: true},
		{name: "same/ipv6-zone", first: "fe80::1%eth0", then: "fe80::2%eth1", same: true},
		{name: "other/ipv4-neighbour", first: "192.0.2.7", then: "192.0.2.8"},
		{name: "other/ipv6-next-64", first: "2001:db8:1:2::1", then: "2001:db8:1:3::1"},
		{name: "other/ipv4-vs-ipv6", first: "192.0.2.7", then: "::c000:207"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			cfg := enroll.DefaultServerConfig()
			cfg.FailLimit = 1
			srv, _ := c.throttled(cfg, nil)
			if _, err := srv.Enroll(t.Context(), badRequest(t, c), netip.MustParseAddr(tt.first)); codes.Of(err) != codes.TokenUnknown {
				t.Fatalf("first: %v", err)
			}
			_, err := srv.Enroll(t.Context(), badRequest(t, c), netip.MustParseAddr(tt.then))
			if throttled := codes.Of(err) == codes.TokenThrottled; throttled != tt.same {
				t.Fatalf("%s after %s: %v; throttled %v, want %v", tt.then, tt.first, err, throttled, tt.same)
			}
		})
	}
}

// TestThrottleBounded: the table never tracks more than MaxSources
// sources. To make room it drops closed windows first, and only when
// there are none the oldest open one.
func TestThrottleBounded(t *testing.T) {
	c := newCluster(t)
	cfg := enroll.DefaultServerConfig()
	cfg.FailLimit, cfg.MaxSources = 1, 3
	srv, clock := c.throttled(cfg, nil)
	ip := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 51, byte(i >> 8), byte(i)}) }
	fail := func(i int) {
		t.Helper()
		if _, err := srv.Enroll(t.Context(), badRequest(t, c), ip(i)); codes.Of(err) != codes.TokenUnknown {
			t.Fatalf("source %d: %v, want %s", i, err, codes.TokenUnknown)
		}
	}
	throttled := func(i int) bool {
		_, err := srv.Enroll(t.Context(), badRequest(t, c), ip(i))
		return codes.Of(err) == codes.TokenThrottled
	}

	// Full of open windows: each new source pushes out the oldest.
	for i := range 1000 {
		fail(i)
		clock.Advance(time.Millisecond)
		if n := srv.ThrottledSources(); n > cfg.MaxSources {
			t.Fatalf("%d sources tracked after %d, want at most %d", n, i+1, cfg.MaxSources)
		}
	}
	if n := srv.ThrottledSources(); n != cfg.MaxSources {
		t.Fatalf("%d sources tracked, want %d", n, cfg.MaxSources)
	}
	// A probe that is not throttled is a failure of its own: probe the
	// throttled sources first.
	for _, p := range []struct {
		i    int
		want bool
	}{{999, true}, {998, true}, {997, true}, {996, false}} {
		if got := throttled(p.i); got != p.want {
			t.Errorf("source %d throttled %v, want %v", p.i, got, p.want)
		}
	}

	// A closed window goes before the oldest open one.
	c = newCluster(t)
	srv, clock = c.throttled(cfg, nil)
	fail(1)
	clock.Advance(time.Second)
	fail(2)
	fail(3)
	clock.t = pkitest.Now.Add(cfg.FailWindow) // 1's window has closed, 2's and 3's are open
	fail(4)
	if n := srv.ThrottledSources(); n != 3 {
		t.Fatalf("%d sources tracked, want 3", n)
	}
	for _, p := range []struct {
		i    int
		want bool
	}{{2, true}, {3, true}, {4, true}, {1, false}} {
		if got := throttled(p.i); got != p.want {
			t.Errorf("source %d throttled %v, want %v", p.i, got, p.want)
		}
	}
	// Every window closed: one new source sweeps all of them out.
	clock.Advance(2 * cfg.FailWindow)
	fail(5)
	if n := srv.ThrottledSources(); n != 1 {
		t.Fatalf("%d sources tracked after every window closed, want 1", n)
	}
}

// TestThrottleDefaults: a zero throttle field means its default; and the
// config's limits are validated.
func TestThrottleDefaults(t *testing.T) {
	c := newCluster(t)
	srv, clock := c.throttled(enroll.ServerConfig{}, nil)
	src := netip.MustParseAddr("192.0.2.7")
	var got []codes.Code
	for range enroll.DefaultFailLimit + 1 {
		_, err := srv.Enroll(t.Context(), badRequest(t, c), src)
		got = append(got, codes.Of(err))
	}
	want := append(slices.Repeat([]codes.Code{codes.TokenUnknown}, enroll.DefaultFailLimit), codes.TokenThrottled)
	if !slices.Equal(got, want) {
		t.Fatalf("codes %v, want %v", got, want)
	}
	clock.Advance(enroll.DefaultFailWindow - time.Nanosecond)
	if _, err := srv.Enroll(t.Context(), badRequest(t, c), src); codes.Of(err) != codes.TokenThrottled {
		t.Fatalf("inside the default window: %v", err)
	}
	clock.Advance(time.Nanosecond)
	if _, err := srv.Enroll(t.Context(), badRequest(t, c), src); codes.Of(err) != codes.TokenUnknown {
		t.Fatalf("after the default window: %v", err)
	}
	for i := range enroll.DefaultMaxSources + 10 {
		_, _ = srv.Enroll(t.Context(), badRequest(t, c), netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}))
	}
	if n := srv.ThrottledSources(); n != enroll.DefaultMaxSources {
		t.Fatalf("%d sources tracked, want the default bound %d", n, enroll.DefaultMaxSources)
	}
}

func TestServerConfigValidateThrottle(t *testing.T) {
	tests := []struct {
		name string
		edit func(*enroll.ServerConfig)
		ok   bool
	}{
		{name: "ok/default", edit: func(*enroll.ServerConfig) {}, ok: true},
		{name: "ok/smallest", edit: func(c *enroll.ServerConfig) { c.FailLimit, c.FailWindow, c.MaxSources = 1, time.Nanosecond, 1 }, ok: true},
		{name: "ok/largest-table", edit: func(c *enroll.ServerConfig) { c.MaxSources = enroll.MaxMaxSources }, ok: true},
		{name: "fail/limit-zero", edit: func(c *enroll.ServerConfig) { c.FailLimit = 0 }},
		{name: "fail/limit-negative", edit: func(c *enroll.ServerConfig) { c.FailLimit = -1 }},
		{name: "fail/window-zero", edit: func(c *enroll.ServerConfig) { c.FailWindow = 0 }},
		{name: "fail/window-negative", edit: func(c *enroll.ServerConfig) { c.FailWindow = -time.Second }},
		{name: "fail/sources-zero", edit: func(c *enroll.ServerConfig) { c.MaxSources = 0 }},
		{name: "fail/sources-over", edit: func(c *enroll.ServerConfig) { c.MaxSources = enroll.MaxMaxSources + 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := enroll.DefaultServerConfig()
			tt.edit(&cfg)
			err := cfg.Validate()
			if ok := err == nil; ok != tt.ok {
				t.Fatalf("Validate(%+v) = %v, want ok %v", cfg, err, tt.ok)
			}
			if !tt.ok && codes.Of(err) != codes.ConfigInvalid {
				t.Fatalf("code %q, want %s", codes.Of(err), codes.ConfigInvalid)
			}
		})
	}
	d := enroll.DefaultServerConfig()
	if d.FailLimit != 10 || d.FailWindow != time.Minute || d.MaxSources != 4096 {
		t.Fatalf("defaults %+v, want 10 failures per minute and 4096 sources", d)
	}
}
