package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient/localclienttest"
)

// TestStatusOutOfPool: `meshctl status` on a worker out of the gossip
// pool (the default, issue 54) says it runs no gossip and where its
// liveness comes from, and exits 0; on a worker in the pool it shows the
// pool's counts and no such line.
func TestStatusOutOfPool(t *testing.T) {
	worker := apitype.Status{State: "running", Version: "1.4.0", Cluster: "prod", ClusterID: "0123456789abcdef",
		Node: "w1", NodeID: "id-w1", Role: "worker", CAHolderNode: "c1", OverlayIP: "10.42.0.5", Underlay: "192.0.2.5"}
	status := func(st apitype.Status) result {
		sock := localclienttest.Serve(t, &fakeMeshd{status: func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, st)
		}})
		return meshctl(t, "--socket", sock, "status")
	}
	out := worker
	out.OutOfPool = true
	r := status(out)
	const line = "gossip:        none: out of the pool (gossip_pool: false), the others' liveness from the node list"
	if r.exit != exitOK || !strings.Contains(r.stdout, line+"\n") {
		t.Fatalf("out of the pool: exit %d, stdout:\n%s\nstderr:\n%s\nwant the line %q", r.exit, r.stdout, r.stderr, line)
	}
	in := worker
	in.Gossip = &apitype.Gossip{Members: 12, Alive: 12, Keys: 1, PrimaryKey: "0badc0de"}
	r = status(in)
	if r.exit != exitOK || !strings.Contains(r.stdout, "12 members, 12 alive") || strings.Contains(r.stdout, "out of the pool") {
		t.Fatalf("in the pool: exit %d, stdout:\n%s", r.exit, r.stdout)
	}
}
