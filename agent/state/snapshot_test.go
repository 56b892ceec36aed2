package state

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

var update = flag.Bool("update", false, "create missing golden snapshots in testdata (existing ones are frozen and never rewritten)")

const goldenV1 = "testdata/snapshot-v1.bin"

// goldenFSM builds the known state frozen in testdata/snapshot-v1.bin: the
// command types of its day (no renewal, no tracked request), a consumed and
// an open token, a removed node with revocations, and the audit events they
// produced. fullFSM (fullstate_test.go) is the one with every command type.
func goldenFSM(t testing.TB) *FSM {
	f := New()
	mustApply(t, f, bootstrapCmd())
	mustApply(t, f, MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker), Actor: "uid:0"})
	mustApply(t, f, MintToken{Record: tokenRecord(2, "c1", pki.RoleControl), Actor: "uid:0"})
	bound := tokenRecord(3, "w3", pki.RoleWorker)
	bound.Addr = "192.0.2.7"
	mustApply(t, f, MintToken{Record: bound, Actor: "uid:0"})
	mustApply(t, f, admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"))
	mustApply(t, f, admitCmd(2, "n-c1", "c1", pki.RoleControl, "10.42.0.3"))
	mustApply(t, f, SetNodeState{NodeID: "n-w1", State: NodeRemoved, At: t0.Add(2 * time.Minute), Actor: "uid:0"})
	return f
}

// persist runs the FSM's snapshot through a raft snapshot store and opens
// it again, as raft does before Restore.
func persist(t *testing.T, f *FSM) io.ReadCloser {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	store := raft.NewInmemSnapshotStore()
	_, trans := raft.NewInmemTransport("")
	defer trans.Close()
	sink, err := store.Create(raft.SnapshotVersionMax, 10, 1, raft.Configuration{}, 1, trans)
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	_, rc, err := store.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

func TestSnapshotPersistRestore(t *testing.T) {
	for _, tc := range []struct {
		name string
		fsm  func(testing.TB) *FSM
	}{
		{"empty", func(testing.TB) *FSM { return New() }},
		{"bootstrapped", bootstrapped},
		{"full", goldenFSM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.fsm(t)
			fresh := New()
			if err := fresh.Restore(persist(t, f)); err != nil {
				t.Fatalf("Restore: %v", err)
			}
			if got, want := fresh.snapshot(), f.snapshot(); !reflect.DeepEqual(got, want) {
				t.Fatalf("restored state differs:\n got %+v\nwant %+v", got, want)
			}
			if !bytes.Equal(stateBytes(t, fresh), stateBytes(t, f)) {
				t.Fatal("restored state encodes differently")
			}
		})
	}
}

func TestRestoreReplacesState(t *testing.T) {
	empty := New()
	f := goldenFSM(t)
	if err := f.Restore(persist(t, empty)); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Cluster(); ok || len(f.Nodes()) != 0 || len(f.Tokens()) != 0 || len(f.Audit()) != 0 {
		t.Fatal("Restore of an empty snapshot left state behind")
	}
	if err := f.Restore(io.NopCloser(strings.NewReader("junk"))); err == nil {
		t.Fatal("Restore of junk succeeded")
	}
}

// The snapshot is a deep copy: applying after Snapshot does not change it.
func TestSnapshotIsACopy(t *testing.T) {
	f := bootstrapped(t)
	want := stateBytes(t, f)
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, f, MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker)})
	var b bytes.Buffer
	taken := *snap.(*fsmSnapshot).s
	taken.Index = 0 // as stateBytes leaves it
	if err := WriteSnapshot(&b, &taken); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.Bytes(), want) {
		t.Fatal("snapshot changed after a later Apply")
	}
}

func TestSnapshotGoldenV1(t *testing.T) {
	want := goldenFSM(t).snapshot()
	want.Index = 0 // the frozen v1 file predates the index field; it must decode all the same
	// and the key rotation a removal owes (issue 27)
	want.Cluster.KeysOwed = nil
	clearSeenFrom(want) // issue 29: an admission records where the join came from; the file predates it
	if *update {
		var b bytes.Buffer
		if err := WriteSnapshot(&b, want); err != nil {
			t.Fatal(err)
		}
		writeGolden(t, goldenV1, b.Bytes())
	}
	raw := readGolden(t, goldenV1)
	got, err := ReadSnapshot(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("the frozen v1 snapshot no longer decodes: %v", err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("the frozen v1 snapshot decodes to another state:\n got %+v\nwant %+v", got, want)
	}
	f := New()
	if err := f.Restore(io.NopCloser(bytes.NewReader(raw))); err != nil {
		t.Fatal(err)
	}
	if n, ok := f.NodeByName("c1"); !ok || n.OverlayIP.String() != "10.42.0.3" || n.Role != pki.RoleControl {
		t.Fatalf("NodeByName(c1) after restore = %+v, %v", n, ok)
	}
	if len(f.Revocations()) != 2 || len(f.Audit()) != 7 {
		t.Fatalf("restored %d revocations, %d audit events", len(f.Revocations()), len(f.Audit()))
	}
}

// writeGolden creates a golden file under -update but never replaces one:
// a released snapshot format is frozen, and a repository-wide -update run
// must not rewrite it (delete the file by hand to mean it).
func writeGolden(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		t.Logf("-update: %s is frozen; left as it is", path)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func readGolden(t testing.TB, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (generate it once with go test ./agent/state -run '^%s$' -update)", err, t.Name())
	}
	return raw
}

func TestReadSnapshotRefuses(t *testing.T) {
	var good bytes.Buffer
	if err := WriteSnapshot(&good, goldenFSM(t).snapshot()); err != nil {
		t.Fatal(err)
	}
	g := good.Bytes()
	body := g[len(snapshotMagic)+1:]
	withVersion := func(v byte) []byte {
		return append(append([]byte(snapshotMagic), v), body...)
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want codes.Code
	}{
		{"empty", nil, codes.Internal},
		{"magic-only", []byte(snapshotMagic), codes.Internal},
		{"wrong-magic", append([]byte("meshd-snapshoT\n\x01"), body...), codes.Internal},
		{"version-0", withVersion(0), codes.SnapshotVersion},
		{"version-2", withVersion(2), codes.SnapshotVersion},
		{"truncated", g[:len(g)/2], codes.Internal},
		{"trailing", append(append([]byte(nil), g...), "{}"...), codes.Internal},
		{"not-json", append([]byte(snapshotMagic+"\x01"), "hello"...), codes.Internal},
		{"node-misfiled", []byte(snapshotMagic + "\x01" + `{"nodes":{"a":{"id":"b"}}}`), codes.Internal},
		{"ipam-orphan", []byte(snapshotMagic + "\x01" + `{"ipam":{"10.0.0.1":"ghost"}}`), codes.Internal},
		{"ipam-bad-ip", []byte(snapshotMagic + "\x01" + `{"ipam":{"x":"a"},"nodes":{"a":{"id":"a"}}}`), codes.Internal},
		{"ipam-empty-ip", []byte(snapshotMagic + "\x01" + `{"ipam":{"":"a"},"nodes":{"a":{"id":"a"}}}`), codes.Internal},
		{"ipam-mapped-ip", []byte(snapshotMagic + "\x01" + `{"ipam":{"::ffff:10.0.0.1":"a"},"nodes":{"a":{"id":"a"}}}`), codes.Internal},
		{"token-misfiled", []byte(snapshotMagic + "\x01" + `{"tokens":{"` + strings.Repeat("00", 32) + `":{"hash":"` + strings.Repeat("11", 32) + `"}}}`), codes.Internal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ReadSnapshot(bytes.NewReader(tc.in))
			if got := codes.Of(err); got != tc.want {
				t.Fatalf("ReadSnapshot = %+v, %v; code %q, want %q", s, err, got, tc.want)
			}
		})
	}
}

// The FSM's index survives a snapshot and restore, so a follower restored
// from a snapshot knows how far its state reaches.
func TestSnapshotKeepsIndex(t *testing.T) {
	f := bootstrapped(t)
	data, _ := Encode(MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker)})
	if r := f.Apply(&raft.Log{Index: 42, Type: raft.LogCommand, Data: data}); r != nil {
		t.Fatal(r)
	}
	var b bytes.Buffer
	if err := WriteSnapshot(&b, f.snapshot()); err != nil {
		t.Fatal(err)
	}
	g := New()
	if err := g.Restore(io.NopCloser(&b)); err != nil {
		t.Fatal(err)
	}
	if f.Index() != 42 || g.Index() != 42 {
		t.Fatalf("index %d, restored %d; want 42", f.Index(), g.Index())
	}
}

// A snapshot holding more audit events or request results than are kept
// (one written by a meshd with larger bounds, say) reads back with the
// newest of each.
func TestReadSnapshotTrims(t *testing.T) {
	big := New().snapshot()
	for i := range AuditSize + 3 {
		big.Audit = append(big.Audit, AuditEvent{Code: codes.EventNodeActive, At: t0.Add(time.Duration(i) * time.Second)})
	}
	for i := range RequestsKept + 3 {
		big.Requests = append(big.Requests, RequestResult{ID: fmt.Sprint("req-", i)})
	}
	var b bytes.Buffer
	if err := WriteSnapshot(&b, big); err != nil {
		t.Fatal(err)
	}
	s, err := ReadSnapshot(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Audit) != AuditSize || !s.Audit[0].At.Equal(big.Audit[3].At) || !s.Audit[AuditSize-1].At.Equal(big.Audit[AuditSize+2].At) {
		t.Fatalf("audit: %d events from %v to %v, want the newest %d", len(s.Audit), s.Audit[0].At, s.Audit[len(s.Audit)-1].At, AuditSize)
	}
	if len(s.Requests) != RequestsKept || s.Requests[0].ID != "req-3" || s.Requests[RequestsKept-1] != big.Requests[RequestsKept+2] {
		t.Fatalf("requests: %d from %s to %s, want the newest %d", len(s.Requests), s.Requests[0].ID, s.Requests[len(s.Requests)-1].ID, RequestsKept)
	}
}

func TestWriteSnapshotFails(t *testing.T) {
	errDisk := errors.New("disk full")
	if err := WriteSnapshot(io.Discard, nil); err == nil {
		t.Fatal("WriteSnapshot(nil) succeeded")
	}
	// A small snapshot sits in the buffer until Flush; a large one reaches
	// the writer while it is encoded. Either way the writer's error comes
	// back.
	for _, tc := range []struct {
		name string
		s    *Snapshot
	}{
		{"at-flush", New().snapshot()},
		{"while-encoding", fullFSM(t).snapshot()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := WriteSnapshot(failingWriter{errDisk}, tc.s); !errors.Is(err, errDisk) {
				t.Fatalf("WriteSnapshot = %v, want %v", err, errDisk)
			}
		})
	}
	t.Run("unencodable", func(t *testing.T) {
		s := bootstrapped(t).snapshot()
		s.Cluster.Created = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) // JSON times stop at year 9999
		var b bytes.Buffer
		if err := WriteSnapshot(&b, s); err == nil {
			t.Fatal("WriteSnapshot of a year-10000 time succeeded")
		}
	})
}

type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }

// fakeSink is a raft.SnapshotSink that records how it was ended.
type fakeSink struct {
	bytes.Buffer
	writeErr, cancelErr error
	closed, cancelled   int
}

func (s *fakeSink) Write(p []byte) (int, error) {
	if s.writeErr != nil {
		return 0, s.writeErr
	}
	return s.Buffer.Write(p)
}
func (s *fakeSink) Close() error  { s.closed++; return nil }
func (s *fakeSink) Cancel() error { s.cancelled++; return s.cancelErr }
func (s *fakeSink) ID() string    { return "fake" }

// Persist closes the sink once the snapshot is written, and cancels it
// (never closes it) when writing fails, returning both errors.
func TestPersistEndsTheSink(t *testing.T) {
	f := fullFSM(t)
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()

	ok := &fakeSink{}
	if err := snap.Persist(ok); err != nil {
		t.Fatalf("Persist: %v", err)
	}
	if ok.closed != 1 || ok.cancelled != 0 {
		t.Fatalf("after a good write: closed %d, cancelled %d; want 1, 0", ok.closed, ok.cancelled)
	}
	got, err := ReadSnapshot(&ok.Buffer)
	if err != nil {
		t.Fatal(err)
	}
	if d := stateDiff(f.snapshot(), got); len(d) > 0 {
		t.Fatalf("persisted state differs:\n%s", strings.Join(d, "\n"))
	}

	errDisk, errCancel := errors.New("disk full"), errors.New("cancel failed")
	bad := &fakeSink{writeErr: errDisk, cancelErr: errCancel}
	err = snap.Persist(bad)
	if !errors.Is(err, errDisk) || !errors.Is(err, errCancel) {
		t.Fatalf("Persist = %v, want both %v and %v", err, errDisk, errCancel)
	}
	if bad.closed != 0 || bad.cancelled != 1 {
		t.Fatalf("after a failed write: closed %d, cancelled %d; want 0, 1", bad.closed, bad.cancelled)
	}
}
