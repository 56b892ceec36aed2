package control

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
)

// fakeClock is a gate's clock that moves only when told.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newFakeClock() *fakeClock           { return &fakeClock{t: time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)} }
func callerN(i int) Caller {
	return Caller{NodeID: fmt.Sprintf("id-w%d", i), Name: fmt.Sprintf("w%d", i)}
}
func addrN(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
}
func netOf(i int) netip.Addr                      { return netip.AddrFrom4([4]byte{172, 16, byte(i), 1}) }
func passes(g *gate, c Caller, a netip.Addr) bool { return g.pass(c, a) == nil }

// TestGate: the shared bound passes a second's worth of calls at once
// (callers and networks all different), refuses the next with
// codes.ControlBusy, and passes again as the second goes by.
func TestGate(t *testing.T) {
	clk := newFakeClock()
	g := newGate("reports", gateLimits{Shared: 5, PerNet: 5, PerCaller: 1, CallerBurst: 1}, clk.now, nil)
	for i := range 5 {
		if err := g.pass(callerN(i), netOf(i)); err != nil {
			t.Fatalf("call %d of the first 5: %v", i, err)
		}
	}
	if err := g.pass(callerN(5), netOf(5)); codes.Of(err) != codes.ControlBusy {
		t.Fatalf("the 6th call within the second: %v, want %s", err, codes.ControlBusy)
	}
	clk.add(time.Second)
	if err := g.pass(callerN(6), netOf(6)); err != nil {
		t.Fatalf("a second later: %v", err)
	}
}

// TestGateOneCallerSpendsOnlyItsOwn: a caller far past its own bound is
// refused, spends nothing of its network's or the shared bound, and
// every other caller, of its network or not, passes as if it were
// silent. Fails on 8b0a8d4, where one budget served every caller.
func TestGateOneCallerSpendsOnlyItsOwn(t *testing.T) {
	clk := newFakeClock()
	g := newGate("node lists", listLimits(), clk.now, nil)
	flooder, home := callerN(0), netOf(1)
	ok := 0
	for range 10_000 {
		if passes(g, flooder, home) {
			ok++
		}
	}
	if ok != listLimits().CallerBurst {
		t.Fatalf("the flooder passed %d of 10,000 calls at once, want its burst %d", ok, listLimits().CallerBurst)
	}
	if err := g.pass(flooder, home); codes.Of(err) != codes.ControlBusy {
		t.Fatalf("the flooder past its bound: %v, want %s", err, codes.ControlBusy)
	}
	// Its neighbours: the network's share less the flooder's burst.
	for i := 1; i <= listLimits().PerNet-listLimits().CallerBurst; i++ {
		if err := g.pass(callerN(i), home); err != nil {
			t.Fatalf("neighbour %d of the flooder: %v", i, err)
		}
	}
	if err := g.pass(callerN(999), home); codes.Of(err) != codes.ControlBusy {
		t.Fatalf("one caller more from the spent network: %v, want %s", err, codes.ControlBusy)
	}
	// Other networks: what is left of the shared bound.
	left := listLimits().Shared - listLimits().PerNet
	for i := range left {
		if err := g.pass(callerN(1000+i), netOf(100+i)); err != nil {
			t.Fatalf("caller %d of another network: %v", i, err)
		}
	}
	if err := g.pass(callerN(5000), netOf(250)); codes.Of(err) != codes.ControlBusy {
		t.Fatalf("past the shared bound: %v, want %s", err, codes.ControlBusy)
	}
	// The flooder's budget refills at its own rate, not faster.
	clk.add(time.Second)
	ok = 0
	for range 100 {
		if passes(g, flooder, addrN(7)) {
			ok++
		}
	}
	if ok != listLimits().PerCaller {
		t.Errorf("a second later the flooder passed %d, want %d", ok, listLimits().PerCaller)
	}
}

// TestGateIPv6Network: an IPv6 caller's network is its /64.
func TestGateIPv6Network(t *testing.T) {
	clk := newFakeClock()
	g := newGate("x", gateLimits{Shared: 100, PerNet: 2, PerCaller: 10, CallerBurst: 10}, clk.now, nil)
	a, b, other := netip.MustParseAddr("2001:db8:1:2::1"), netip.MustParseAddr("2001:db8:1:2:ffff::9"), netip.MustParseAddr("2001:db8:1:3::1")
	if !passes(g, callerN(1), a) || !passes(g, callerN(2), b) {
		t.Fatal("the first two of one /64 refused")
	}
	if passes(g, callerN(3), b) {
		t.Error("a third caller of the /64 passed its network's bound of 2")
	}
	if !passes(g, callerN(4), other) {
		t.Error("a caller of the next /64 was refused")
	}
}

// TestGateTableBounded: 100,000 callers one after another never hold
// more than gateTableMax entries, and callers idle long enough to have
// refilled are dropped at the next call. The measured bytes per entry
// are what gateTableMax's comment says.
func TestGateTableBounded(t *testing.T) {
	clk := newFakeClock()
	g := newGate("x", gateLimits{Shared: 1 << 30, PerNet: 1 << 30, PerCaller: 1, CallerBurst: 3}, clk.now, nil)
	for i := range 100_000 {
		g.pass(callerN(i), addrN(i))
		if i%1000 == 0 {
			clk.add(time.Millisecond)
		}
		if n := g.callers.len(); n > gateTableMax {
			t.Fatalf("after %d callers the table holds %d, past %d", i+1, n, gateTableMax)
		}
	}
	if n := g.nets.len(); n > gateTableMax {
		t.Fatalf("the network table holds %d, past %d", n, gateTableMax)
	}
	clk.add(3 * time.Second) // a caller's bucket refills in burst/rate = 3 s
	g.pass(callerN(-1), addrN(1))
	if n := g.callers.len(); n != 1 {
		t.Errorf("after every caller was idle 3 s the table holds %d, want 1 (the last caller)", n)
	}
	// A caller still within its refill time stays, with what it spent.
	c := callerN(-2)
	for range 3 {
		g.pass(c, addrN(2))
	}
	clk.add(2 * time.Second)
	g.pass(callerN(-3), addrN(3))
	if passes(g, c, addrN(2)) && passes(g, c, addrN(2)) && passes(g, c, addrN(2)) {
		t.Error("a caller within its refill time got a fresh budget: dropped too early")
	}
}

// TestGateTableMemory measures what one tracked caller costs (run with
// -v): the figure in gateTableMax's comment, with room for another
// goroutine's allocations in between.
func TestGateTableMemory(t *testing.T) {
	clk := newFakeClock()
	g := newGate("x", gateLimits{Shared: 1 << 30, PerNet: 1 << 30, PerCaller: 1, CallerBurst: 3}, clk.now, nil)
	callers := make([]Caller, gateTableMax)
	for i := range callers {
		callers[i] = Caller{NodeID: fmt.Sprintf("%032x", i)} // a node id's length
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, c := range callers {
		g.pass(c, addrN(0)) // one network: the callers' table alone grows
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / float64(gateTableMax)
	t.Logf("%.0f bytes per tracked caller (%d callers: %.2f MB); 10,000 workers active within a refill time fill the table: %d entries",
		per, gateTableMax, per*gateTableMax/1e6, g.callers.len())
	if per > 600 {
		t.Errorf("%.0f bytes per tracked caller, past the 600 budgeted", per)
	}
	runtime.KeepAlive(callers)
}
