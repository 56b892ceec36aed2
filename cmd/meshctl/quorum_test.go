package main

import (
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient/localclienttest"
	"github.com/meshd/meshd/codes"
)

// The -update flag rewrites testdata/*.golden. Another test file of this
// package may define it too: package variables are set before init runs,
// so this defines it only if none did.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite testdata/*.golden")
	}
}

func updatingGolden() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// quorumStatus is a control node's status with the given quorum and the
// warnings meshd sends with it.
func quorumStatus(leader string, q *apitype.Quorum, ws ...apitype.Warning) apitype.Status {
	return apitype.Status{State: "running", Version: "1.4.0", Cluster: "prod", ClusterID: "0123456789abcdef",
		Node: "c1", NodeID: "id-c1", Role: "control", CAHolderNode: "c1", OverlayIP: "10.42.0.1", Underlay: "192.0.2.1",
		Raft: "voter", Leader: leader, Quorum: q, Warnings: ws}
}

// TestStatusQuorumGolden: the quorum lines and warnings of `meshctl
// status` on a voter, healthy, at risk and without a leader, against
// testdata/status-*.golden (stdout, then stderr; -update rewrites them).
func TestStatusQuorumGolden(t *testing.T) {
	voters := func(c3 apitype.Voter, leader string) []apitype.Voter {
		vs := []apitype.Voter{
			{Name: "c1", Self: true, Reachable: true, LastContactMS: 12},
			{Name: "c2", Reachable: true, LastContactMS: 40},
			c3,
		}
		for i := range vs {
			if vs[i].Name == leader {
				vs[i].Leader, vs[i].LastContactMS = true, -1
			}
		}
		return vs
	}
	down := apitype.Voter{Name: "c3", LastContactMS: -1, Error: "dial tcp 192.0.2.3:7300: connect: connection refused"}
	tests := []struct {
		name string
		st   apitype.Status
	}{
		{"healthy", quorumStatus("c2", &apitype.Quorum{Leader: "c2", Reachable: 3, Needed: 2,
			Voters: voters(apitype.Voter{Name: "c3", Reachable: true, LastContactMS: 8}, "c2")})},
		{"at-risk", quorumStatus("c2", &apitype.Quorum{Leader: "c2", Reachable: 2, Needed: 2, Voters: voters(down, "c2")},
			apitype.Warning{Code: codes.QuorumAtRisk, Detail: "2 of 3 raft voters reachable, 2 needed for a quorum; unreachable: c3"})},
		{"no-leader", quorumStatus("", &apitype.Quorum{Reachable: 1, Needed: 2,
			Voters: []apitype.Voter{{Name: "c1", Self: true, Reachable: true, LastContactMS: 5300},
				{Name: "c2", LastContactMS: -1, Error: "context deadline exceeded"}, down}},
			apitype.Warning{Code: codes.NoLeaderWarning, Detail: "1 of 3 raft voters reachable from here, 2 needed for a quorum; unreachable: c2, c3"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sock := localclienttest.Serve(t, &fakeMeshd{status: func(w http.ResponseWriter, _ *http.Request) {
				writeJSON(w, http.StatusOK, tt.st)
			}})
			r := meshctl(t, "--socket", sock, "status")
			if r.exit != exitOK {
				t.Fatalf("exit %d\nstderr:\n%s", r.exit, r.stderr)
			}
			got := "-- stdout --\n" + r.stdout + "-- stderr --\n" + r.stderr
			path := filepath.Join("testdata", "status-"+tt.name+".golden")
			if updatingGolden() {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
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
