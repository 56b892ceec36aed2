package control

import (
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
)

// TestGate: a gate passes a second's worth of calls at once, refuses the
// next with codes.ControlBusy, and passes again as the second goes by.
func TestGate(t *testing.T) {
	g := newGate("reports", 5)
	for i := range 5 {
		if err := g.pass(); err != nil {
			t.Fatalf("call %d of the first 5: %v", i, err)
		}
	}
	if err := g.pass(); codes.Of(err) != codes.ControlBusy {
		t.Fatalf("the 6th call within the second: %v, want %s", err, codes.ControlBusy)
	}
	waitFor(t, 2*time.Second, "the gate to pass again", func() bool { return g.pass() == nil })
}
