package state

import (
	"bytes"
	"testing"

	"github.com/meshd/meshd/pki"
)

// FuzzFSMCommand feeds arbitrary log entries to Decode and Apply, on an
// empty FSM and on one with a cluster, tokens and nodes: neither may panic,
// and Apply returns nil or an error.
func FuzzFSMCommand(f *testing.F) {
	for _, c := range []Command{
		bootstrapCmd(),
		MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker)},
		admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"),
		admitCmd(9, "n-w9", "w9", pki.RoleWorker, "10.42.0.9"),
		SetNodeState{NodeID: "n-w9", State: NodeRemoved, At: t0},
	} {
		b, err := Encode(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{3, 'n', 'u', 'l', 'l'})
	f.Add([]byte("\x01{\"cluster\":{\"overlay\":\"::/0\"},\"origin\":{\"id\":\"x\",\"name\":\"x\",\"overlay_ip\":\"::1\"}}"))

	base := New()
	mustApply(f, base, bootstrapCmd())
	mustApply(f, base, MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker)})
	mustApply(f, base, MintToken{Record: tokenRecord(9, "w9", pki.RoleWorker)})
	mustApply(f, base, admitCmd(9, "n-w9", "w9", pki.RoleWorker, "10.42.0.9"))

	f.Fuzz(func(t *testing.T, data []byte) {
		if c, err := Decode(data); err == nil {
			if _, err := Encode(c); err != nil {
				t.Fatalf("decoded %T does not encode: %v", c, err)
			}
		}
		for _, fsm := range []*FSM{New(), {s: *base.snapshot()}} {
			switch r := fsm.Apply(rawLog(data)).(type) {
			case nil, error:
			default:
				t.Fatalf("Apply returned %T", r)
			}
			// Whatever happened, reads and FreeIP still work.
			_, _ = fsm.FreeIP()
			_ = fsm.Nodes()
		}
	})
}

// FuzzSnapshotRestore feeds arbitrary bytes to ReadSnapshot and Restore:
// no panic, and whatever reads back writes back and reads again the same.
func FuzzSnapshotRestore(f *testing.F) {
	var b bytes.Buffer
	if err := WriteSnapshot(&b, goldenFSM(f).snapshot()); err != nil {
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
		_, _ = fsm.FreeIP()
		_ = fsm.Nodes()
		_ = fsm.Tokens()
	})
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }
