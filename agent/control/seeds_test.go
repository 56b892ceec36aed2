package control

import (
	"fmt"
	"slices"
	"testing"
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
