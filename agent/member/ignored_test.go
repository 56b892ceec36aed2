package member

import (
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/desired"
)

// TestIgnoredBook (issue 54 item 6): a joiner seen in gossip before its
// record is a debug line, and no warning when its record comes within
// ignoredGrace; a member unmatched for ignoredGrace for the same reason is
// warned about once, and the book says when that falls due; a new reason
// starts the grace again.
func TestIgnoredBook(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	seen := map[string]ignoredSeen{}
	names := func(igs []desired.Ignored) []string {
		var out []string
		for _, ig := range igs {
			out = append(out, ig.Name)
		}
		return out
	}
	joiner := desired.Ignored{Name: "w9", ID: "id-w9", Reason: "no active record with this id"}
	evil := desired.Ignored{Name: "evil", ID: "forged", Reason: "no active record with this id"}

	debug, warn, due := ignoredBook(seen, t0, []desired.Ignored{evil, joiner})
	if !slices.Equal(names(debug), []string{"evil", "w9"}) || warn != nil || !due.Equal(t0.Add(ignoredGrace)) {
		t.Fatalf("first look: debug %v, warn %v, due %v; want both at debug, none warned, due after the grace", names(debug), names(warn), due)
	}
	// The joiner's record arrives: it is matched (gone from the list).
	debug, warn, _ = ignoredBook(seen, t0.Add(2*time.Second), []desired.Ignored{evil})
	if debug != nil || warn != nil {
		t.Fatalf("a look within the grace: debug %v, warn %v; want nothing new", names(debug), names(warn))
	}
	if _, ok := seen["w9"]; ok {
		t.Fatal("a matched member is still in the book")
	}
	debug, warn, due = ignoredBook(seen, t0.Add(ignoredGrace), []desired.Ignored{evil})
	if debug != nil || !slices.Equal(names(warn), []string{"evil"}) || !due.IsZero() {
		t.Fatalf("at the grace: debug %v, warn %v, due %v; want evil warned, nothing pending", names(debug), names(warn), due)
	}
	if _, warn, _ = ignoredBook(seen, t0.Add(time.Hour), []desired.Ignored{evil}); warn != nil {
		t.Fatalf("warned twice about evil: %v", names(warn))
	}
	evil.Reason = "tag role \"control\", record says worker"
	debug, warn, due = ignoredBook(seen, t0.Add(time.Hour), []desired.Ignored{evil})
	if !slices.Equal(names(debug), []string{"evil"}) || warn != nil || !due.Equal(t0.Add(time.Hour+ignoredGrace)) {
		t.Fatalf("a new reason: debug %v, warn %v, due %v; want a debug line and a new grace", names(debug), names(warn), due)
	}
}
