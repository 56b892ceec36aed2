package watch

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
)

type state = map[string]map[string]json.RawMessage

func raw(s string) json.RawMessage { return json.RawMessage(fmt.Sprintf("%q", s)) }

func TestDeltaCarriesOnlyWhatChanged(t *testing.T) {
	tb := NewTable(0)
	if ch, _ := tb.Since(0); ch.Index != 0 || !ch.Empty() {
		t.Fatalf("before the first update: %+v, want an empty change at 0", ch)
	}
	tb.Update(10, state{"nodes": {"a": raw("a1"), "b": raw("b1")}, "revoked": {"0": raw("fp0")}})
	var c Copy
	full, next := tb.Since(c.Index())
	if !full.Full || full.Index != 10 || len(full.Put["nodes"]) != 2 {
		t.Fatalf("first contact: %+v, want the full table at 10", full)
	}
	if got := c.Apply(full); len(got) != 2 {
		t.Fatalf("sections changed by the first change: %v", got)
	}
	select {
	case <-next:
		t.Fatal("next closed before the table moved")
	default:
	}
	tb.Update(12, state{"nodes": {"a": raw("a2"), "b": raw("b1")}, "revoked": {"0": raw("fp0"), "1": raw("fp1")}})
	<-next // closed by the update
	d, _ := tb.Since(c.Index())
	if d.Full || d.Index != 12 || len(d.Put["nodes"]) != 1 || string(d.Put["nodes"]["a"]) != `"a2"` || len(d.Put["revoked"]) != 1 {
		t.Fatalf("delta since 10: %+v, want a2 and fp1 only", d)
	}
	c.Apply(d)
	tb.Update(15, state{"nodes": {"a": raw("a2")}, "revoked": {"0": raw("fp0"), "1": raw("fp1")}})
	d, _ = tb.Since(c.Index())
	if d.Full || len(d.Put) != 0 || len(d.Del["nodes"]) != 1 || d.Del["nodes"][0] != "b" {
		t.Fatalf("delta since 12: %+v, want b deleted only", d)
	}
	c.Apply(d)
	if _, ok := c.Item("nodes", "b"); ok || c.Len("nodes") != 1 || c.Index() != 15 {
		t.Fatalf("copy after the deletion: %v at %d", c.Items("nodes"), c.Index())
	}
	if d, _ := tb.Since(15); !d.Empty() || d.Index != 15 {
		t.Fatalf("since the table's own index: %+v, want empty at 15", d)
	}
	// A change from a table behind the copy (another control node that
	// lags) changes nothing.
	if got := c.Apply(Change{Index: 11, Put: state{"nodes": {"z": raw("z")}}}); got != nil || c.Len("nodes") != 1 {
		t.Fatalf("a change from behind was applied: %v", got)
	}
}

// TestPastTheTombstonesIsFull: a receiver behind the oldest deletion the
// table still remembers gets the whole table, and ends up without the
// deleted items.
func TestPastTheTombstonesIsFull(t *testing.T) {
	tb := NewTable(4)
	s := state{"nodes": {}}
	for i := range 10 {
		s["nodes"][fmt.Sprint(i)] = raw("v")
	}
	tb.Update(1, s)
	var c Copy
	c.Apply(mustSince(tb, 0))
	for i := range 10 { // delete one per index: ten tombstones, four kept at most
		s = state{"nodes": maps.Clone(s["nodes"])}
		delete(s["nodes"], fmt.Sprint(i))
		s["nodes"][fmt.Sprint(100+i)] = raw("w")
		tb.Update(uint64(2+i), s)
	}
	if tb.Floor() <= 1 {
		t.Fatalf("floor %d: tombstones were never dropped", tb.Floor())
	}
	ch := mustSince(tb, c.Index())
	if !ch.Full {
		t.Fatalf("since 1, below the floor %d: not full", tb.Floor())
	}
	c.Apply(ch)
	if !sameAs(&c, tb) {
		t.Fatalf("copy %v differs from the table", c.Items("nodes"))
	}
	// At the floor or above, deltas again.
	if ch := mustSince(tb, tb.Floor()); ch.Full {
		t.Fatal("since the floor: full")
	}
}

func mustSince(tb *Table, since uint64) Change {
	ch, _ := tb.Since(since)
	return ch
}

func sameAs(c *Copy, tb *Table) bool {
	full := mustSince(tb, 0)
	for _, s := range tb.Sections() {
		if !maps.EqualFunc(c.Items(s), full.Put[s], rawEqual) {
			return false
		}
	}
	return true
}

// TestCopiesConverge: receivers at random indexes, fed from the table
// after random puts, changes and deletions (with few tombstones kept),
// always end up holding what the table holds, through a JSON round trip
// as on the wire.
func TestCopiesConverge(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	tb := NewTable(8)
	s := state{"nodes": {}, "revoked": {}}
	copies := make([]Copy, 20)
	for index := uint64(1); index <= 400; index++ {
		next := state{"nodes": maps.Clone(s["nodes"]), "revoked": maps.Clone(s["revoked"])}
		for range r.IntN(4) {
			k := fmt.Sprint(r.IntN(30))
			switch r.IntN(3) {
			case 0:
				delete(next["nodes"], k)
			default:
				next["nodes"][k] = raw(fmt.Sprint(r.IntN(5)))
			}
		}
		if r.IntN(5) == 0 {
			next["revoked"][Seq(len(next["revoked"]))] = raw(fmt.Sprint(index))
		}
		s = next
		tb.Update(index, s)
		for i := range copies {
			if r.IntN(10) != 0 { // most receivers fall behind for a while
				continue
			}
			b, _, _ := tb.Encoded(copies[i].Index())
			var ch Change
			if err := json.Unmarshal(b, &ch); err != nil {
				t.Fatal(err)
			}
			copies[i].Apply(ch)
			if !sameAs(&copies[i], tb) {
				t.Fatalf("index %d: copy %d at %d differs from the table", index, i, copies[i].Index())
			}
		}
	}
	if len(SortSeq(copies[0].Items("revoked"))) != copies[0].Len("revoked") {
		t.Fatal("SortSeq lost items")
	}
}
