package enroll_test

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki/pkitest"
)

// follower is a ledger copy that lags the leader's, as on a raft follower:
// readIndex brings it up to date and counts the round trips.
type follower struct {
	mu        sync.Mutex
	replica   map[enroll.TokenHash]enroll.TokenRecord
	leader    map[enroll.TokenHash]enroll.TokenRecord
	syncErr   error
	readIndex int
}

func newFollower() *follower {
	return &follower{replica: map[enroll.TokenHash]enroll.TokenRecord{}, leader: map[enroll.TokenHash]enroll.TokenRecord{}}
}

func (f *follower) local(h enroll.TokenHash) (enroll.TokenRecord, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec, ok := f.replica[h]
	return rec, ok
}

func (f *follower) sync(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.readIndex++
	if f.syncErr != nil {
		return f.syncErr
	}
	maps.Copy(f.replica, f.leader)
	return nil
}

func (f *follower) Token(ctx context.Context, h enroll.TokenHash) (enroll.TokenRecord, bool, error) {
	return enroll.LookupToken(ctx, h, f.local, f.sync)
}

func (f *follower) readIndexes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.readIndex
}

// TestLookupToken: a token this node holds costs no read index; one it
// does not hold costs exactly one, after which it is looked up again.
func TestLookupToken(t *testing.T) {
	known := enroll.TokenRecord{Hash: testSecret().Hash(), Name: "w1"}
	fresh := enroll.TokenRecord{Hash: enroll.TokenHash{1}, Name: "w2"}
	stale := known
	stale.ConsumedBy = "node-9" // the leader has seen it used; this node not yet
	tests := []struct {
		name      string
		setup     func(f *follower)
		h         enroll.TokenHash
		want      enroll.TokenRecord
		found     bool
		reads     int
		wantCode  codes.Code
		wantError bool
	}{
		{name: "ok/known-locally", setup: func(f *follower) { f.replica[known.Hash], f.leader[known.Hash] = known, known },
			h: known.Hash, want: known, found: true},
		{name: "ok/known-locally-leader-unreachable", setup: func(f *follower) {
			f.replica[known.Hash] = known
			f.syncErr = codes.Wrap(codes.NoLeader, errors.New("no leader"))
		}, h: known.Hash, want: known, found: true},
		{name: "ok/stale-locally-answered-locally", setup: func(f *follower) { f.replica[known.Hash], f.leader[known.Hash] = known, stale },
			h: known.Hash, want: known, found: true},
		{name: "ok/minted-elsewhere", setup: func(f *follower) { f.leader[fresh.Hash] = fresh },
			h: fresh.Hash, want: fresh, found: true, reads: 1},
		{name: "fail/unknown", setup: func(f *follower) { f.replica[known.Hash], f.leader[known.Hash] = known, known },
			h: fresh.Hash, reads: 1},
		{name: "fail/no-leader", setup: func(f *follower) {
			f.leader[fresh.Hash] = fresh
			f.syncErr = codes.Wrap(codes.NoLeader, errors.New("no leader"))
		}, h: fresh.Hash, reads: 1, wantCode: codes.NoLeader, wantError: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFollower()
			tt.setup(f)
			rec, found, err := f.Token(t.Context(), tt.h)
			if (err != nil) != tt.wantError || codes.Of(err) != tt.wantCode {
				t.Fatalf("error %v, want code %q", err, tt.wantCode)
			}
			if found != tt.found || !reflect.DeepEqual(rec, tt.want) {
				t.Errorf("record %+v found %v, want %+v found %v", rec, found, tt.want, tt.found)
			}
			if n := f.readIndexes(); n != tt.reads {
				t.Errorf("%d read indexes, want %d", n, tt.reads)
			}
		})
	}
}

// TestEnrollOnFollower: an enroll server over a follower's ledger asks the
// leader nothing to look up a token it holds, once for a token it does not
// hold, and, for a source sending bad tokens, no more often than the
// throttle's limit.
func TestEnrollOnFollower(t *testing.T) {
	c := newCluster(t)
	f := newFollower()
	f.replica[c.rec.Hash], f.leader[c.rec.Hash] = c.rec, c.rec
	c.ledger.token = func(h enroll.TokenHash) (enroll.TokenRecord, bool, error) { return f.Token(context.Background(), h) }
	srv, _ := c.throttled(enroll.DefaultServerConfig(), nil)
	src := netip.MustParseAddr("192.0.2.7")

	good, _ := c.request(t, "w1")
	if _, err := srv.Enroll(t.Context(), good, src); err != nil {
		t.Fatal(err)
	}
	if n := f.readIndexes(); n != 0 {
		t.Fatalf("a token this node holds cost %d read indexes, want 0", n)
	}
	if _, err := srv.Enroll(t.Context(), badRequest(t, c), src); codes.Of(err) != codes.TokenUnknown {
		t.Fatalf("bad token: %v", err)
	}
	if n := f.readIndexes(); n != 1 {
		t.Fatalf("an unknown token cost %d read indexes, want 1", n)
	}
	for range 2000 {
		_, _ = srv.Enroll(t.Context(), badRequest(t, c), src)
	}
	if n := f.readIndexes(); n != enroll.DefaultFailLimit {
		t.Fatalf("2001 bad tokens cost %d read indexes, want %d (the throttle's limit)", n, enroll.DefaultFailLimit)
	}
}

// TestEnrollLocalChecksFirst: what can be judged without the ledger is
// judged before the ledger is asked anything, with the same code the
// ledger's record would give; the joiner's claimed expiry can refuse but
// never admit.
func TestEnrollLocalChecksFirst(t *testing.T) {
	tests := []struct {
		name string
		edit func(c *cluster, r *enroll.Request)
		want codes.Code
		asks bool // the ledger is asked
	}{
		{name: "local/protocol", edit: func(_ *cluster, r *enroll.Request) { r.Protocol = 0 }, want: codes.EnrollRejected},
		{name: "local/bad-name", edit: func(_ *cluster, r *enroll.Request) { r.Name = "-w1" }, want: codes.BadNodeName},
		{name: "local/no-secret", edit: func(_ *cluster, r *enroll.Request) { r.Secret = enroll.Secret{} }, want: codes.TokenUnknown},
		{name: "local/claimed-expired", edit: func(_ *cluster, r *enroll.Request) { r.Expires = pkitest.Now.Add(-time.Second) }, want: codes.TokenExpired},
		{name: "local/claimed-expired-at-instant", edit: func(_ *cluster, r *enroll.Request) { r.Expires = pkitest.Now }, want: codes.TokenExpired},
		{name: "local/claimed-expired-unknown-token", edit: func(_ *cluster, r *enroll.Request) {
			r.Secret, _ = enroll.NewSecret()
			r.Expires = pkitest.Now
		}, want: codes.TokenExpired},
		{name: "ledger/claimed-unexpired", edit: func(_ *cluster, r *enroll.Request) { r.Expires = pkitest.Now.Add(time.Second) }, asks: true},
		{name: "ledger/claimed-unexpired-record-expired", edit: func(c *cluster, r *enroll.Request) {
			r.Expires = pkitest.Now.Add(time.Second)
			c.rec.Expires = pkitest.Now
		}, want: codes.TokenExpired, asks: true},
		{name: "ledger/no-claim", edit: func(_ *cluster, r *enroll.Request) { r.Expires = time.Time{} }, asks: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCluster(t)
			req, _ := c.request(t, "w1")
			req.Expires = c.rec.Expires
			tt.edit(c, &req)
			_, err := c.server().Enroll(t.Context(), req, netip.MustParseAddr("127.0.0.1"))
			if got := codes.Of(err); got != tt.want {
				t.Fatalf("Enroll = %v (code %q), want %q", err, got, tt.want)
			}
			if asked := len(c.ledger.Calls()) > 0; asked != tt.asks {
				t.Fatalf("ledger calls %v; asked %v, want %v", c.ledger.Calls(), asked, tt.asks)
			}
		})
	}
}
