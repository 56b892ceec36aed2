package control

import (
	"testing"

	"github.com/meshd/meshd/agent/state"
)

// countingFSM counts the leader's reads of every record.
type countingFSM struct {
	index uint64
	reads int
}

func (f *countingFSM) Index() uint64 { return f.index }
func (f *countingFSM) Nodes() []state.Node {
	f.reads++
	return nil
}

// TestCarrierWatchReadsRecordsOnChange: the carrier watch's quarter-second
// tick reads the records only when raft applied something since its last
// read (issue 54: it copied every record four times a second on the
// leader, at 1,000 records a visible share of its idle CPU).
func TestCarrierWatchReadsRecordsOnChange(t *testing.T) {
	f := &countingFSM{index: 7}
	w := &carrierWatch{}
	for range 8 {
		w.prefixes(f)
	}
	if f.reads != 1 {
		t.Fatalf("8 ticks at one raft index read the records %d times, want 1", f.reads)
	}
	f.index++
	w.prefixes(f)
	w.prefixes(f)
	if f.reads != 2 {
		t.Fatalf("after one apply: %d reads, want 2", f.reads)
	}
}
