package member

import (
	"fmt"
	"slices"
	"testing"
)

// TestRejoinPick: a pass probes at most rejoinPerPass missing peers, the
// head of the list (the control nodes) on every pass and a window of the
// rest that moves on, so 1,000 missing peers cost 8 probes a pass and each
// is probed within 200 passes; a short list is probed whole. On 7211129
// a pass probed every missing peer at once.
func TestRejoinPick(t *testing.T) {
	var turn rejoinTurn
	short := []string{"a", "b", "c"}
	if got := turn.pick(short); !slices.Equal(got, short) {
		t.Fatalf("short list: %v", got)
	}
	var missing []string
	for i := range 1000 {
		missing = append(missing, fmt.Sprintf("p%04d", i))
	}
	probed := map[string]int{}
	passes := (len(missing) - rejoinLead + rejoinPerPass - rejoinLead - 1) / (rejoinPerPass - rejoinLead)
	for range passes {
		got := turn.pick(missing)
		if len(got) != rejoinPerPass {
			t.Fatalf("a pass probes %d peers, want %d", len(got), rejoinPerPass)
		}
		if !slices.Equal(got[:rejoinLead], missing[:rejoinLead]) {
			t.Fatalf("a pass did not probe the head of the list: %v", got[:rejoinLead])
		}
		for _, p := range got {
			probed[p]++
		}
	}
	for _, p := range missing {
		if probed[p] == 0 {
			t.Fatalf("%s not probed in %d passes", p, passes)
		}
	}
	if n := probed[missing[500]]; n != 1 {
		t.Errorf("a peer past the head was probed %d times in one round, want 1", n)
	}
}
