package state

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
)

// TestRecordCABackup: only the holder on record records a backup; the
// time is kept in the cluster record and survives a snapshot.
func TestRecordCABackup(t *testing.T) {
	f := bootstrapped(t)
	at := t0.Add(2 * time.Hour)
	if err := apply(t, f, RecordCABackup{NodeID: "n-x", At: at}); codes.Of(err) != codes.NotCAHolder {
		t.Fatalf("backup by a non-holder: %v", err)
	}
	mustApply(t, f, RecordCABackup{NodeID: originID, At: at, Actor: "uid=0@ctl-0"})
	g := New()
	if err := g.Restore(io.NopCloser(bytes.NewReader(stateBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
	if c, _ := g.Cluster(); !c.CABackedUp.Equal(at) {
		t.Fatalf("backup time %v after a snapshot round trip", c.CABackedUp)
	}
}
