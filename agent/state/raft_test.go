package state

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// newSingleVoter starts a real raft node over the in-memory transport and
// stores, bootstraps it as the only voter, and waits for it to lead.
func newSingleVoter(t *testing.T, fsm raft.FSM) *raft.Raft {
	t.Helper()
	conf := raft.DefaultConfig()
	conf.LocalID = "n-origin"
	conf.HeartbeatTimeout = 50 * time.Millisecond
	conf.ElectionTimeout = 50 * time.Millisecond
	conf.LeaderLeaseTimeout = 50 * time.Millisecond
	conf.CommitTimeout = 5 * time.Millisecond
	conf.LogOutput = io.Discard
	conf.LogLevel = "ERROR"

	addr, trans := raft.NewInmemTransport("")
	logs := raft.NewInmemStore()
	snaps := raft.NewInmemSnapshotStore()
	r, err := raft.NewRaft(conf, fsm, logs, logs, snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Shutdown().Error(); err != nil {
			t.Errorf("raft shutdown: %v", err)
		}
		trans.Close()
	})
	cfg := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: conf.LocalID, Address: addr}}}
	if err := r.BootstrapCluster(cfg).Error(); err != nil {
		t.Fatal(err)
	}
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		select {
		case leader := <-r.LeaderCh():
			if leader {
				return r
			}
		case <-deadline.C:
			t.Fatalf("no leadership within the deadline (state %s)", r.State())
		}
	}
}

// raftApply commits c through raft and returns the FSM's response.
func raftApply(t *testing.T, r *raft.Raft, c Command) error {
	t.Helper()
	data, err := Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	fut := r.Apply(data, 5*time.Second)
	if err := fut.Error(); err != nil {
		t.Fatalf("raft apply %T: %v", c, err)
	}
	if resp := fut.Response(); resp != nil {
		err, ok := resp.(error)
		if !ok {
			t.Fatalf("response %T %v", resp, resp)
		}
		return err
	}
	return nil
}

func TestRaftSingleVoter(t *testing.T) {
	fsm := New()
	r := newSingleVoter(t, fsm)

	for _, c := range []Command{
		bootstrapCmd(),
		MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker), Actor: "uid:0"},
		admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"),
	} {
		if err := raftApply(t, r, c); err != nil {
			t.Fatalf("%T: %v", c, err)
		}
	}
	n, ok := fsm.NodeByName("w1")
	if !ok || n.ID != "n-w1" || n.State != NodeActive {
		t.Fatalf("NodeByName(w1) = %+v, %v", n, ok)
	}
	if rec, _ := fsm.Token(secret(1).Hash()); rec.ConsumedBy != "n-w1" {
		t.Fatalf("token not consumed: %+v", rec)
	}

	// Refusals come back as the FSM response, with their codes intact.
	err := raftApply(t, r, admitCmd(1, "n-w1b", "w1", pki.RoleWorker, "10.42.0.3"))
	if codes.Of(err) != codes.TokenConsumed {
		t.Fatalf("second admit through raft: %v", err)
	}
	mintErr := raftApply(t, r, MintToken{Record: tokenRecord(2, "w2", pki.RoleWorker)})
	if mintErr != nil {
		t.Fatal(mintErr)
	}
	err = raftApply(t, r, admitCmd(2, "n-w2", "w2", pki.RoleWorker, "10.42.0.2"))
	if !errors.Is(err, enroll.ErrIPTaken) {
		t.Fatalf("admit on a taken IP through raft: %v", err)
	}

	// A raft snapshot restores into a fresh FSM.
	if err := r.Snapshot().Error(); err != nil {
		t.Fatalf("raft snapshot: %v", err)
	}
	fresh := New()
	if err := fresh.Restore(persist(t, fsm)); err != nil {
		t.Fatal(err)
	}
	if n, ok := fresh.Node("n-w1"); !ok || n.Name != "w1" {
		t.Fatalf("restored node %+v, %v", n, ok)
	}
}
