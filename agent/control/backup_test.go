package control

import (
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
)

// TestRestoreRefusedWhileHolderAnswers: a restore is refused while the
// holder on record answers over the internal API, with nothing written.
func TestRestoreRefusedWhileHolderAnswers(t *testing.T) {
	c, origin := newCluster(t)
	c2 := c.joinControl(t, origin, "c2")
	sealed, at, err := origin.p.Backup(within(t, 10*time.Second), []byte("a long enough passphrase"), "test")
	if err != nil {
		t.Fatal(err)
	}
	if cl, _ := c2.p.Raft().FSM().Cluster(); !cl.CABackedUp.Equal(at) {
		waitFor(t, 5*time.Second, "the backup time replicated", func() bool {
			cl, _ := c2.p.Raft().FSM().Cluster()
			return cl.CABackedUp.Equal(at)
		})
	}
	if _, err := c2.p.Restore(within(t, 10*time.Second), sealed, []byte("a long enough passphrase"), "test"); codes.Of(err) != codes.CAHolderAlive {
		t.Fatalf("restore while the holder answers: %v", err)
	}
	if hasCADir(c2) || c2.p.HoldsCA() {
		t.Fatal("a refused restore wrote keys")
	}
	if _, err := c2.p.Restore(within(t, 10*time.Second), sealed, []byte("not the passphrase!!"), "test"); codes.Of(err) != codes.BackupPassphrase {
		t.Fatalf("wrong passphrase: %v", err)
	}
}
