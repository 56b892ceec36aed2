package member

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/config"
)

// TestPairActiveRoundsAt10000 (issue 54 item 3, step 3): a worker's pair
// health among 10,000 members, 3 of them control nodes and 5 peers it
// has traffic with, lan timers' 16 probes a round. Every round looks at
// no more than pairScan(16) = 256 targets (a round that read every target
// fails here) and probes at most 16; within ⌈10,000/256⌉ rounds every
// control node and traffic peer has been probed, and no other member ever
// is (a probe would keep an idle tunnel open). A traffic peer whose probes
// fail is probed every round until it answers, though its traffic stopped.
func TestPairActiveRoundsAt10000(t *testing.T) {
	const members, perRound = 10_000, 16
	var targets []pairTarget
	wanted := map[string]bool{}
	for i := range members {
		tg := pairTarget{name: fmt.Sprintf("w%05d", i), addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 42, byte(i >> 8), byte(i)}), 7946)}
		switch i {
		case 17, 4_000, 9_999:
			tg.control = true
			wanted[tg.name] = true
		case 3, 2_500, 5_000, 7_777, 9_998:
			wanted[tg.name] = true
		}
		targets = append(targets, tg)
	}
	sortTargets(targets)
	var (
		mu      sync.Mutex
		traffic = map[string]bool{"w00003": true, "w02500": true, "w05000": true, "w07777": true, "w09998": true}
		failing = map[string]bool{}
		looks   int
		probed  = map[string]int{}
		byAddr  = map[netip.AddrPort]string{}
	)
	for _, tg := range targets {
		byAddr[tg.addr] = tg.name
	}
	reach := func(_ context.Context, ap netip.AddrPort) error {
		mu.Lock()
		defer mu.Unlock()
		name := byAddr[ap]
		probed[name]++
		if failing[name] {
			return context.DeadlineExceeded
		}
		return nil
	}
	cfg := config.PairProbe{Every: time.Hour, Timeout: time.Second, Misses: 3, Parallel: 4, PerRound: perRound}
	ph := newPairHealth(cfg, func() []pairTarget { return targets }, reach, slog.New(slog.DiscardHandler), time.Now)
	ph.active = func(tg pairTarget) bool {
		mu.Lock()
		defer mu.Unlock()
		looks++
		return tg.control || traffic[tg.name]
	}
	round := func() (looked, probes int) {
		mu.Lock()
		l0, p0 := looks, sum(probed)
		mu.Unlock()
		ph.round(t.Context())
		mu.Lock()
		defer mu.Unlock()
		return looks - l0, sum(probed) - p0
	}

	rounds := (members + pairScan(perRound) - 1) / pairScan(perRound)
	for r := range rounds {
		looked, probes := round()
		if looked > pairScan(perRound) || probes > perRound {
			t.Fatalf("round %d looked at %d targets and probed %d: want at most %d and %d", r, looked, probes, pairScan(perRound), perRound)
		}
	}
	mu.Lock()
	for name := range wanted {
		if probed[name] == 0 {
			t.Errorf("%s (a control node or a traffic peer) not probed in %d rounds", name, rounds)
		}
	}
	for name, n := range probed {
		if !wanted[name] {
			t.Errorf("%s, idle, probed %d times", name, n)
		}
	}
	t.Logf("%d rounds over %d members: %d looks (at most %d a round), %d probes, all to the %d control nodes and traffic peers",
		rounds, members, looks, pairScan(perRound), sum(probed), len(wanted))

	failing["w05000"] = true // its probes fail; once one has, its traffic stops
	first := probed["w05000"]
	mu.Unlock()
	for r := 0; ; r++ {
		if r > rounds {
			t.Fatalf("w05000 not probed again in %d rounds", rounds)
		}
		round()
		mu.Lock()
		again := probed["w05000"] > first
		mu.Unlock()
		if again {
			break
		}
	}
	mu.Lock()
	delete(traffic, "w05000")
	before := probed["w05000"]
	mu.Unlock()
	for range rounds {
		round()
	}
	mu.Lock()
	defer mu.Unlock()
	if got := probed["w05000"] - before; got != rounds {
		t.Errorf("a failing peer without traffic probed %d times in %d rounds: want every round from its next probe on", got, rounds)
	}
	if d := ph.unreachable(); len(d) != 1 || d[0] != "w05000" {
		t.Errorf("unreachable %v, want [w05000]", d)
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestPairActive: a worker always probes a control node; another member
// only with traffic on its tunnel (here no overlay at all: never).
func TestPairActive(t *testing.T) {
	rt := &Runtime{node: &node{}}
	if !rt.pairActive(pairTarget{name: "c1", control: true}) {
		t.Error("a control node is not probed")
	}
	if rt.pairActive(pairTarget{name: "w1", addr: netip.MustParseAddrPort("10.42.0.9:7946")}) {
		t.Error("a worker with no tunnel is probed")
	}
}
