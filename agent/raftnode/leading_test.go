package raftnode_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshd/meshd/pki/pkitest"
)

// TestWhileLeader: fn runs once the node leads, not before; its context
// ends when the node stops leading (here: raft shut down), and
// WhileLeader returns when its own context ends.
func TestWhileLeader(t *testing.T) {
	ca := pkitest.NewCA(t, "alpha")
	n, addr := open(t, ca, "origin", filepath.Join(t.TempDir(), "raft"))
	started, ended, returned := make(chan bool, 4), make(chan struct{}, 4), make(chan struct{})
	wctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		defer close(returned)
		n.WhileLeader(wctx, func(ctx context.Context) {
			started <- n.IsLeader()
			<-ctx.Done()
			ended <- struct{}{}
		})
	}()
	select {
	case <-started:
		t.Fatal("fn ran on a node that was never bootstrapped")
	default:
	}
	if err := n.Bootstrap(addr); err != nil {
		t.Fatal(err)
	}
	select {
	case leading := <-started:
		if !leading {
			t.Fatal("fn ran while the node did not lead")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("fn did not run within 10 s of the node leading")
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("fn's context did not end within 10 s of raft shutting down")
	}
	cancel()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("WhileLeader did not return within 5 s of its context ending")
	}
	if len(started) != 0 {
		t.Fatal("fn ran again on a node that no longer leads")
	}
}
