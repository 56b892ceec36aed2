package agent

import (
	"context"
	"testing"

	"github.com/meshd/meshd/agent/localapi"
)

// TestOperatorActor: a local API caller is recorded by its uid at this
// node's name, from the peer credentials the socket recorded.
func TestOperatorActor(t *testing.T) {
	ctx := localapi.WithActor(context.Background(), localapi.Actor{UID: 1000, GID: 1000, PID: 42, Known: true})
	if got := operatorOn(ctx, "c2"); got != "uid=1000@c2" {
		t.Errorf("operator %q, want uid=1000@c2", got)
	}
	root := localapi.WithActor(context.Background(), localapi.Actor{UID: 0, PID: 7, Known: true})
	if got := operatorOn(root, "origin"); got != "uid=0@origin" {
		t.Errorf("operator %q, want uid=0@origin", got)
	}
	// No credentials (not the local API): the node, never uid 0.
	if got := operatorOn(context.Background(), "c2"); got != "node:c2" {
		t.Errorf("no credentials: %q, want node:c2", got)
	}
}
