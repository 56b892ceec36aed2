package control

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/enroll"
)

// TestSpread: every node asks every seed, in the ring's order, and the
// nodes of a cluster start at different seeds.
func TestSpread(t *testing.T) {
	seeds := []string{"a:7300", "b:7300", "c:7300"}
	first := map[string]int{}
	for i := range 300 {
		id := fmt.Sprintf("%032x", i*7919)
		got := Spread(seeds, id)
		if !slices.Equal(got, Spread(seeds, id)) {
			t.Fatalf("%s: two orders", id)
		}
		k := slices.Index(seeds, got[0])
		if !slices.Equal(got, append(slices.Clone(seeds[k:]), seeds[:k]...)) {
			t.Fatalf("%s: %v is not the ring from %s", id, got, got[0])
		}
		first[got[0]]++
	}
	for _, s := range seeds {
		if first[s] < 50 {
			t.Fatalf("first seeds %v: %s starts too few of 300 nodes", first, s)
		}
	}
	if got := Spread(seeds[:1], "x"); !slices.Equal(got, seeds[:1]) {
		t.Fatalf("one seed: %v", got)
	}
	if got := Spread(nil, "x"); len(got) != 0 {
		t.Fatalf("no seeds: %v", got)
	}
	if !slices.Equal(seeds, []string{"a:7300", "b:7300", "c:7300"}) {
		t.Fatal("Spread changed its input")
	}
}

// TestHomeFirst: the seed a worker enrolled through comes first, then
// every other seed once in Spread's order; an unknown or absent home
// leaves Spread's order.
func TestHomeFirst(t *testing.T) {
	seeds := []string{"a:7300", "b:7300", "c:7300"}
	for i := range 30 {
		id := fmt.Sprintf("%032x", i*7919)
		spread := Spread(seeds, id)
		for _, home := range seeds {
			got := HomeFirst(seeds, home, id)
			want := append([]string{home}, slices.DeleteFunc(slices.Clone(spread), func(s string) bool { return s == home })...)
			if !slices.Equal(got, want) {
				t.Fatalf("%s, home %s: %v, want %v", id, home, got, want)
			}
		}
		for _, home := range []string{"", "gone:7300"} {
			if got := HomeFirst(seeds, home, id); !slices.Equal(got, spread) {
				t.Fatalf("%s, home %q: %v, want Spread's %v", id, home, got, spread)
			}
		}
	}
	if !slices.Equal(seeds, []string{"a:7300", "b:7300", "c:7300"}) {
		t.Fatal("HomeFirst changed its input")
	}
}

// TestTokensSpreadSeeds: the tokens a control node mints start their seed
// lists at different control nodes (a joiner stops at the first seed that
// answers: when every token listed raft's first control node first, that
// one node answered every join, sick or not; issue 28), each list holding
// every control node once, with its id beside its address.
func TestTokensSpreadSeeds(t *testing.T) {
	c, origin := newCluster(t)
	c.joinControl(t, origin, "c2")
	c.joinControl(t, origin, "c3")
	first := map[string]int{}
	for i := range 24 {
		resp, err := origin.p.Admit(within(t, 5*time.Second), apitype.AdmitRequest{Name: fmt.Sprintf("w%d", i), Role: "worker", TTL: time.Hour}, "uid:0")
		if err != nil {
			t.Fatal(err)
		}
		tok, err := enroll.ParseToken(resp.Token)
		if err != nil {
			t.Fatal(err)
		}
		if len(tok.Seeds) != 3 || len(tok.SeedIDs) != 3 {
			t.Fatalf("token %d: seeds %v, ids %v; want the 3 control nodes", i, tok.Seeds, tok.SeedIDs)
		}
		for j, id := range tok.SeedIDs {
			n, ok := origin.p.raft.FSM().Node(id)
			if !ok || n.EnrollAddr != tok.Seeds[j] {
				t.Fatalf("token %d: seed %s listed with id %s, whose record is %+v", i, tok.Seeds[j], id, n)
			}
		}
		first[tok.Seeds[0]]++
	}
	if len(first) != 3 {
		t.Fatalf("first seeds of 24 tokens: %v; want each of the 3 control nodes first in some", first)
	}
}
