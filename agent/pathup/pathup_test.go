package pathup

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// fakeOverlay is an overlay whose relayed peers go direct when pointed at
// their open address.
type fakeOverlay struct {
	relayed  []netip.Addr
	cands    map[netip.Addr][]netip.AddrPort
	open     map[netip.Addr]netip.AddrPort // the address at which a peer answers directly
	pointed  map[netip.Addr]netip.AddrPort
	asked    []netip.Addr
	rebuilds []netip.Addr
	noDirect map[netip.Addr]string // peers to which no direct path can exist, and why
}

func (f *fakeOverlay) Relayed() []netip.Addr { return slices.Clone(f.relayed) }
func (f *fakeOverlay) Candidates(p netip.Addr) []netip.AddrPort {
	f.asked = append(f.asked, p)
	return f.cands[p]
}
func (f *fakeOverlay) UseDirect(p netip.Addr, a netip.AddrPort) bool {
	if !slices.Contains(f.relayed, p) {
		return false
	}
	f.pointed[p] = a
	return true
}
func (f *fakeOverlay) Rebuild(p netip.Addr) { f.rebuilds = append(f.rebuilds, p) }
func (f *fakeOverlay) NoDirect(p netip.Addr) (string, bool) {
	r, ok := f.noDirect[p]
	return r, ok
}
func (f *fakeOverlay) Changes() <-chan struct{} { return nil } // Step is called by hand

func (f *fakeOverlay) probe(_ context.Context, p netip.Addr) error {
	if a, ok := f.open[p]; ok && f.pointed[p] == a {
		f.relayed = slices.DeleteFunc(f.relayed, func(x netip.Addr) bool { return x == p })
		return nil
	}
	return errors.New("no answer")
}

var (
	peerA = netip.MustParseAddr("10.42.0.3")
	peerB = netip.MustParseAddr("10.42.0.4")
	priv  = netip.MustParseAddrPort("172.16.1.2:4242")
	pubA  = netip.MustParseAddrPort("10.99.0.2:4242")
	pubB  = netip.MustParseAddrPort("10.99.0.3:51000")
)

func newTest(ov *fakeOverlay) (*Upgrader, *time.Time) {
	now := time.Unix(1000, 0)
	cfg := DefaultConfig()
	cfg.Settle = 0
	u := New(cfg, netip.MustParseAddr("10.42.0.2"), ov, ov.probe, slog.New(slog.NewTextHandler(io.Discard, nil)), func() time.Time { return now })
	return u, &now
}

// TestUpgraderMovesToTheAnsweringAddress: a relayed peer is tried once
// its first backoff has passed, at each address in turn; the one that
// answers keeps the tunnel, nothing is rebuilt, and the peer is forgotten.
func TestUpgraderMovesToTheAnsweringAddress(t *testing.T) {
	ov := &fakeOverlay{relayed: []netip.Addr{peerA}, cands: map[netip.Addr][]netip.AddrPort{peerA: {priv, pubA, pubA}},
		open: map[netip.Addr]netip.AddrPort{peerA: pubA}, pointed: map[netip.Addr]netip.AddrPort{}}
	u, now := newTest(ov)
	u.Step(t.Context())
	if len(ov.asked) != 0 {
		t.Fatalf("tried %v before the first backoff (300ms) passed", ov.asked)
	}
	*now = now.Add(300 * time.Millisecond)
	u.Step(t.Context())
	if ov.pointed[peerA] != pubA || len(ov.relayed) != 0 {
		t.Fatalf("pointed at %v, relayed %v; want %v, none", ov.pointed[peerA], ov.relayed, pubA)
	}
	if len(ov.rebuilds) != 0 {
		t.Fatalf("rebuilt %v after a direct path answered", ov.rebuilds)
	}
	if up, failed, _ := u.Counts(); up != 1 || failed != 0 {
		t.Fatalf("counts %d upgraded, %d failed; want 1, 0", up, failed)
	}
	if len(u.peers) != 0 {
		t.Fatalf("still remembers %v", u.peers)
	}
}

// TestUpgraderBacksOffAndRebuilds: a peer with no direct path gets its
// tunnel rebuilt after each failed try, and the tries space out along
// the backoff (5 s, then 30 s); another peer's schedule is its own.
func TestUpgraderBacksOffAndRebuilds(t *testing.T) {
	ov := &fakeOverlay{relayed: []netip.Addr{peerB}, cands: map[netip.Addr][]netip.AddrPort{peerB: {pubB}},
		open: map[netip.Addr]netip.AddrPort{}, pointed: map[netip.Addr]netip.AddrPort{}}
	u, now := newTest(ov)
	u.Step(t.Context())
	tries := func() int { return len(ov.rebuilds) }
	for _, tc := range []struct {
		advance time.Duration
		want    int
	}{
		{300 * time.Millisecond, 1},
		{4 * time.Second, 1},  // 5 s not yet passed
		{time.Second, 2},      // 5 s after the first try
		{29 * time.Second, 2}, // 30 s not yet
		{time.Second, 3},      // 30 s after the second
		{2 * time.Minute, 4},  // then 2 min
		{10 * time.Minute, 5}, // then 10 min
		{9 * time.Minute, 5},  // and 10 min again
		{time.Minute, 6},
	} {
		*now = now.Add(tc.advance)
		u.Step(t.Context())
		if tries() != tc.want {
			t.Fatalf("after +%s: %d tries, want %d", tc.advance, tries(), tc.want)
		}
	}
	if _, failed, _ := u.Counts(); failed != 6 {
		t.Fatalf("failed %d, want 6", failed)
	}
}

// TestUpgraderLeavesLowerPeersToThem: a peer with a lower overlay address
// than this node's tries itself; this node never moves that tunnel.
func TestUpgraderLeavesLowerPeersToThem(t *testing.T) {
	lower := netip.MustParseAddr("10.42.0.1")
	ov := &fakeOverlay{relayed: []netip.Addr{lower}, cands: map[netip.Addr][]netip.AddrPort{lower: {pubA}},
		open: map[netip.Addr]netip.AddrPort{lower: pubA}, pointed: map[netip.Addr]netip.AddrPort{}}
	u, now := newTest(ov)
	for range 3 {
		u.Step(t.Context())
		*now = now.Add(time.Minute)
	}
	if len(ov.asked) != 0 || len(ov.pointed) != 0 {
		t.Fatalf("asked about %v, pointed %v: the lower address's node tries, not this one", ov.asked, ov.pointed)
	}
}

// TestUpgraderForgetsPeersNoLongerRelayed: a tunnel that went direct (or
// away) by other means is forgotten once it has not been relayed for
// Config.Forget, and if it is relayed again its schedule starts from the
// beginning; a tunnel gone mid-try is not rebuilt.
func TestUpgraderForgetsPeersNoLongerRelayed(t *testing.T) {
	ov := &fakeOverlay{relayed: []netip.Addr{peerB}, cands: map[netip.Addr][]netip.AddrPort{peerB: {pubB}},
		open: map[netip.Addr]netip.AddrPort{}, pointed: map[netip.Addr]netip.AddrPort{}}
	u, now := newTest(ov)
	u.Step(t.Context())
	*now = now.Add(300 * time.Millisecond)
	u.Step(t.Context()) // a failed try: the next waits 5 s
	ov.relayed = nil
	u.Step(t.Context()) // the look at the change (Run looks at each)
	*now = now.Add(u.cfg.Forget)
	u.Step(t.Context())
	if len(u.peers) != 0 {
		t.Fatalf("remembers %v a minute after its tunnel stopped being relayed", u.peers)
	}
	ov.relayed = []netip.Addr{peerB}
	u.Step(t.Context())
	*now = now.Add(300 * time.Millisecond)
	ov.relayed = nil // gone between the look and the try: UseDirect says so
	u.peers[peerB].next = *now
	u.try(t.Context(), peerB)
	if len(ov.rebuilds) != 1 {
		t.Fatalf("rebuilds %v: a tunnel gone mid-try must not be rebuilt", ov.rebuilds)
	}
}

// TestUpgraderKeepsTheScheduleWhileTheTunnelIsRebuilt: a failed try
// rebuilds the tunnel, which is not relayed while its handshake runs; the
// peer keeps its schedule through that, so the next try waits the second
// step (5 s), not the first (300 ms) again. Forgetting it at once tried
// and rebuilt a symmetric-NAT pair every 2 s for good.
func TestUpgraderKeepsTheScheduleWhileTheTunnelIsRebuilt(t *testing.T) {
	ov := &fakeOverlay{relayed: []netip.Addr{peerB}, cands: map[netip.Addr][]netip.AddrPort{peerB: {pubB}},
		open: map[netip.Addr]netip.AddrPort{}, pointed: map[netip.Addr]netip.AddrPort{}}
	u, now := newTest(ov)
	u.Step(t.Context())
	*now = now.Add(300 * time.Millisecond)
	u.Step(t.Context()) // a failed try: rebuilt
	if len(ov.rebuilds) != 1 {
		t.Fatalf("rebuilds %v after a failed try, want 1", ov.rebuilds)
	}
	ov.relayed = nil // the handshake runs
	*now = now.Add(250 * time.Millisecond)
	u.Step(t.Context())
	ov.relayed = []netip.Addr{peerB} // relayed again
	for range 16 {                   // 4 s of looks
		*now = now.Add(250 * time.Millisecond)
		u.Step(t.Context())
	}
	if len(ov.rebuilds) != 1 {
		t.Fatalf("rebuilds %v within 5 s of the first try: the schedule started again", ov.rebuilds)
	}
	*now = now.Add(time.Second)
	u.Step(t.Context())
	if len(ov.rebuilds) != 2 {
		t.Fatalf("rebuilds %v after the second step's 5 s, want 2", ov.rebuilds)
	}
}

// TestUpgraderSkipsPeersWithNoDirectPath: a relayed peer to which no
// direct path can exist (both behind NATs, one symmetric) is never asked
// about, pointed elsewhere or rebuilt, however long it stays relayed, and
// the skip is counted once for the episode, not once a look; a peer whose
// answer is not known (NoDirect false) beside it is tried as before.
func TestUpgraderSkipsPeersWithNoDirectPath(t *testing.T) {
	ov := &fakeOverlay{relayed: []netip.Addr{peerA, peerB}, cands: map[netip.Addr][]netip.AddrPort{peerA: {pubA}, peerB: {pubB}},
		open: map[netip.Addr]netip.AddrPort{}, pointed: map[netip.Addr]netip.AddrPort{},
		noDirect: map[netip.Addr]string{peerB: "both behind NATs, this node's symmetric"}}
	u, now := newTest(ov)
	for range 4 * 60 * 30 { // 30 min of looks, 4 a second
		u.Step(t.Context())
		*now = now.Add(250 * time.Millisecond)
	}
	if slices.Contains(ov.asked, peerB) || ov.pointed[peerB].IsValid() || slices.Contains(ov.rebuilds, peerB) {
		t.Fatalf("asked %v, pointed %v, rebuilt %v: a peer with no direct path was tried", ov.asked, ov.pointed, ov.rebuilds)
	}
	if !slices.Contains(ov.rebuilds, peerA) {
		t.Fatalf("rebuilds %v: the peer whose paths are not known was not tried", ov.rebuilds)
	}
	if _, failed, skipped := u.Counts(); skipped != 1 || failed == 0 {
		t.Fatalf("counts %d failed, %d skipped; want some failed (peerA), 1 skipped (peerB, once)", failed, skipped)
	}
}

// TestUpgraderTriesAPeerWhoseAnswerChanged: a skipped peer whose answer
// turns (a node moved networks; its nat tag changed) is tried at the next
// look and moved if a direct path answers; skipped again later, the new
// episode is counted again.
func TestUpgraderTriesAPeerWhoseAnswerChanged(t *testing.T) {
	ov := &fakeOverlay{relayed: []netip.Addr{peerA}, cands: map[netip.Addr][]netip.AddrPort{peerA: {pubA}},
		open: map[netip.Addr]netip.AddrPort{peerA: pubA}, pointed: map[netip.Addr]netip.AddrPort{},
		noDirect: map[netip.Addr]string{peerA: "symmetric"}}
	u, now := newTest(ov)
	for range 40 { // 10 s
		u.Step(t.Context())
		*now = now.Add(250 * time.Millisecond)
	}
	if len(ov.asked) != 0 {
		t.Fatalf("asked about %v while it had no direct path", ov.asked)
	}
	delete(ov.noDirect, peerA)
	u.Step(t.Context())
	if ov.pointed[peerA] != pubA || len(ov.relayed) != 0 {
		t.Fatalf("pointed at %v, relayed %v once its answer changed; want %v, none", ov.pointed[peerA], ov.relayed, pubA)
	}
	ov.relayed, ov.noDirect[peerA] = []netip.Addr{peerA}, "symmetric again"
	u.Step(t.Context())
	if up, failed, skipped := u.Counts(); up != 1 || failed != 0 || skipped != 2 {
		t.Fatalf("counts %d upgraded, %d failed, %d skipped; want 1, 0, 2", up, failed, skipped)
	}
}
