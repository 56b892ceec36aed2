package main

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient/localclienttest"
	"github.com/meshd/meshd/codes"
)

// TestStatusRemovedGolden: a node its cluster no longer knows (issue 52
// item 9) says "removed by the cluster" in `meshctl status`, with the
// code, what it was judged on, the remedy and when it asks again; -o json
// carries state "removed", the coded error and the times
// (testdata/status-removed*.golden; -update rewrites them).
func TestStatusRemovedGolden(t *testing.T) {
	since := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	st := apitype.Status{State: apitype.StateRemoved, Version: "1.4.0", Cluster: "prod", ClusterID: "0123456789abcdef",
		Node: "w1", NodeID: "id-w1", Role: "worker", OverlayIP: "10.42.0.7", Underlay: "192.0.2.7", Raft: "none",
		Error: apitype.NewError(codes.RemovedByCluster, codes.Wrap(codes.RemovedByCluster,
			errors.New("removed by the cluster: every control node it asks (1) refuses it as not a member (192.0.2.1:7300: node w1 (id-w1) is removed)"))),
		Removed: &apitype.Removed{Since: since, Asked: since.Add(2 * time.Minute), NextAsk: since.Add(3 * time.Minute), Asks: 2}}
	sock := localclienttest.Serve(t, &fakeMeshd{status: func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, st)
	}})
	for _, tt := range []struct{ name, golden string }{{"text", "status-removed.golden"}, {"json", "status-removed-json.golden"}} {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"--socket", sock, "status"}
			if tt.name == "json" {
				args = append(args, "-o", "json")
			}
			r := meshctl(t, args...)
			if r.exit != exitOK {
				t.Fatalf("exit %d\nstderr:\n%s", r.exit, r.stderr)
			}
			got := "-- stdout --\n" + r.stdout + "-- stderr --\n" + r.stderr
			path := filepath.Join("testdata", tt.golden)
			if updatingGolden() {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("meshctl status differs from %s (-update rewrites it):\ngot:\n%s\nwant:\n%s", path, got, want)
			}
		})
	}
}
