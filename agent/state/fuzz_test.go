package state

import (
	"bytes"
	"strings"
	"testing"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// FuzzFSMCommand feeds arbitrary log entries to Decode and Apply, on an
// empty FSM, on one with a cluster, tokens and nodes, and on fullFSM.
// Neither may panic; Apply returns nil or an error, the same on two copies
// of one state (it is deterministic); and a refused entry changes nothing
// but, for a tracked command, the remembered result.
func FuzzFSMCommand(f *testing.F) {
	seeds := []Command{
		bootstrapCmd(),
		MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker)},
		admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"),
		admitCmd(9, "n-w9", "w9", pki.RoleWorker, "10.42.0.9"),
		SetNodeState{NodeID: "n-w9", State: NodeRemoved, At: t0},
	}
	for _, s := range fullHistory(f) {
		seeds = append(seeds, s.cmd)
	}
	for _, c := range seeds {
		b, err := Encode(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{3, 'n', 'u', 'l', 'l'})
	f.Add([]byte("\x01{\"cluster\":{\"overlay\":\"::/0\"},\"origin\":{\"id\":\"x\",\"name\":\"x\",\"overlay_ip\":\"::1\"}}"))
	f.Add([]byte("\x06{\"req_id\":\"r\",\"inner\":\"BnsicmVxX2lkIjoiciJ9\"}")) // a tracked command inside a tracked command

	base := New()
	mustApply(f, base, bootstrapCmd())
	mustApply(f, base, MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker)})
	mustApply(f, base, MintToken{Record: tokenRecord(9, "w9", pki.RoleWorker)})
	mustApply(f, base, admitCmd(9, "n-w9", "w9", pki.RoleWorker, "10.42.0.9"))
	full := fullFSM(f)

	f.Fuzz(func(t *testing.T, data []byte) {
		c, decErr := Decode(data)
		if decErr == nil {
			if _, err := Encode(c); err != nil {
				t.Fatalf("decoded %T does not encode: %v", c, err)
			}
		}
		for _, state := range []*Snapshot{New().snapshot(), base.snapshot(), full.snapshot()} {
			fsm, twin := fsmFrom(state), fsmFrom(state)
			err := applyRaw(t, fsm, data)
			if decErr != nil && err == nil {
				t.Fatalf("Apply accepted an entry Decode refuses: %v", decErr)
			}
			if twinErr := applyRaw(t, twin, data); codes.Of(twinErr) != codes.Of(err) || (twinErr == nil) != (err == nil) {
				t.Fatalf("Apply is not deterministic: %v, then %v", err, twinErr)
			}
			if d := stateDiff(fsm.snapshot(), twin.snapshot()); len(d) > 0 {
				t.Fatalf("Apply is not deterministic:\n%s", strings.Join(d, "\n"))
			}
			if err != nil {
				after := fsm.snapshot()
				if _, tracked := c.(Tracked); tracked {
					after.Requests = state.Requests // a tracked failure is remembered; nothing else changes
				}
				if d := stateDiff(state, after); len(d) > 0 {
					t.Fatalf("a refused %T (%v) changed the state:\n%s", c, err, strings.Join(d, "\n"))
				}
			}
			// Whatever happened, reads and FreeIP still work.
			_, _ = fsm.FreeIP()
			_ = fsm.Nodes()
		}
	})
}

// fsmFrom returns an FSM holding a copy of s, as Restore would.
func fsmFrom(s *Snapshot) *FSM {
	f := &FSM{s: *s.clone()}
	f.index.Store(s.Index)
	return f
}

// applyRaw applies data as a raft entry and returns Apply's error.
func applyRaw(t *testing.T, f *FSM, data []byte) error {
	t.Helper()
	switch r := f.Apply(rawLog(data)).(type) {
	case nil:
		return nil
	case error:
		return r
	default:
		t.Fatalf("Apply returned %T", r)
		return nil
	}
}

// FuzzSnapshotRestore feeds arbitrary bytes to ReadSnapshot and Restore:
// no panic, and whatever reads back writes back and reads again as the
// same state, field by field (not only as the same bytes: a field lost on
// every write would re-encode stably); Restore builds that state too.
func FuzzSnapshotRestore(f *testing.F) {
	// The frozen files were written by a known-good writer: a writer that
	// drops a field would drop it from seeds it wrote itself, too.
	f.Add(readGolden(f, goldenV1))
	f.Add(readGolden(f, goldenV1Full))
	var b bytes.Buffer
	if err := WriteSnapshot(&b, fullFSM(f).snapshot()); err != nil {
		f.Fatal(err)
	}
	f.Add(b.Bytes())
	f.Add([]byte(snapshotMagic + "\x01{}"))
	f.Add([]byte(snapshotMagic + "\x01null"))
	f.Add([]byte(snapshotMagic + "\x02{}"))
	f.Add([]byte("garbage"))

	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ReadSnapshot(bytes.NewReader(data))
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := WriteSnapshot(&out, s); err != nil {
			t.Fatalf("a snapshot that reads does not write: %v", err)
		}
		again, err := ReadSnapshot(bytes.NewReader(out.Bytes()))
		if err != nil {
			t.Fatalf("a rewritten snapshot does not read: %v", err)
		}
		if d := stateDiff(s, again); len(d) > 0 {
			t.Fatalf("a rewritten snapshot reads back another state:\n%s", strings.Join(d, "\n"))
		}
		var out2 bytes.Buffer
		if err := WriteSnapshot(&out2, again); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), out2.Bytes()) {
			t.Fatal("snapshot is not stable across a rewrite")
		}
		fsm := New()
		if err := fsm.Restore(nopCloser{bytes.NewReader(data)}); err != nil {
			t.Fatalf("Restore refused what ReadSnapshot accepted: %v", err)
		}
		if d := stateDiff(s, fsm.snapshot()); len(d) > 0 {
			t.Fatalf("Restore built another state than ReadSnapshot read:\n%s", strings.Join(d, "\n"))
		}
		_, _ = fsm.FreeIP()
		_ = fsm.Nodes()
		_ = fsm.Tokens()
	})
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }
