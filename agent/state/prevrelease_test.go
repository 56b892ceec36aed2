package state

import (
	"bufio"
	"encoding/hex"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// goldenPrevLog is fullHistory's commands as the previous release
// (e2e/testdata/previous-release, a3da2fc) encoded them for the raft log,
// one hex line each, written by that release's Encode. Never regenerate
// it: a new release adds a file of its own.
const goldenPrevLog = "testdata/raftlog-a3da2fc.hex"

// TestPreviousReleaseRaftLog: every command type the previous release
// wrote to the raft log decodes with this build, has the outcome it had,
// and leaves the state this build's own encoding of the same steps leaves.
func TestPreviousReleaseRaftLog(t *testing.T) {
	f, err := os.Open(goldenPrevLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var entries [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		b, err := hex.DecodeString(strings.TrimSpace(sc.Text()))
		if err != nil {
			t.Fatalf("%s line %d: %v", goldenPrevLog, len(entries)+1, err)
		}
		entries = append(entries, b)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	steps := fullHistory(t)
	if len(entries) == 0 || len(entries) > len(steps) {
		t.Fatalf("%s has %d entries; fullHistory has %d steps", goldenPrevLog, len(entries), len(steps))
	}
	steps = steps[:len(entries)]
	got := New()
	types := map[cmdType]bool{}
	for i, b := range entries {
		c, err := Decode(b)
		if err != nil {
			t.Fatalf("entry %d (%T in fullHistory): the previous release's encoding no longer decodes: %v", i+1, steps[i].cmd, err)
		}
		if reflect.TypeOf(c) != reflect.TypeOf(steps[i].cmd) {
			t.Fatalf("entry %d decodes to %T, fullHistory has %T", i+1, c, steps[i].cmd)
		}
		types[c.commandType()] = true
		if tr, ok := c.(Tracked); ok {
			inner, err := Decode(tr.Inner)
			if err != nil {
				t.Fatalf("entry %d: tracked command: %v", i+1, err)
			}
			types[inner.commandType()] = true
		}
		r := got.Apply(&raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: b})
		err, _ = r.(error)
		steps[i].check(t, err)
	}
	// Every command type the previous release had (1-15, none added since).
	for ct := typeBootstrap; ct <= typeFailJoin; ct++ {
		if !types[ct] {
			t.Errorf("command type %d is not in %s", ct, goldenPrevLog)
		}
	}
	want := replayHistory(t, steps).snapshot()
	if d := stateDiff(want, got.snapshot()); len(d) > 0 {
		t.Fatalf("the previous release's log replays to another state:\n%s", strings.Join(d, "\n"))
	}
	if !reflect.DeepEqual(got.snapshot(), want) {
		t.Fatalf("the previous release's log replays to another state:\n got %+v\nwant %+v", got.snapshot(), want)
	}
}
