package meshd_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/meshd/meshd/"

var updateDeps = flag.Bool("update", false, "rewrite cmd/*/deps.txt")

// allowed lists, per package, the project packages it may import: DESIGN §2,
// imports pointing one way. A package not listed here fails the test, so a
// new package has to take its place in the graph on purpose.
var allowed = map[string][]string{
	"codes":                             {},
	"crash":                             {},
	"trust":                             {"codes"},
	"pki":                               {"trust", "codes"},
	"pki/pkitest":                       {"pki", "codes"},
	"enroll":                            {"trust", "codes", "crash"},
	"gossip":                            {"codes"},
	"gossip/gossiptest":                 {},
	"mesh":                              {"pki", "codes"},
	"agent/state":                       {"enroll", "pki", "codes"},
	"agent/apitype":                     {"codes"},
	"agent/localclient":                 {"agent/apitype", "codes"},
	"agent/raftnode":                    {"agent/state", "codes"},
	"agent/watch":                       {},
	"agent/control":                     {"agent/raftnode", "agent/state", "agent/watch", "agent/apitype", "enroll", "pki", "codes", "crash"},
	"agent/desired":                     {"mesh", "gossip", "pki"},
	"persource":                         {},
	"idtoken/idtokentest":               {},
	"idtoken":                           {"codes"},
	"netcheck":                          {"codes", "persource"},
	"names":                             {"enroll", "persource"},
	"names/resolved":                    {},
	"hostroute":                         {"codes"},
	"agent/preflight":                   {"agent/apitype", "agent/config", "agent/statedir", "enroll", "mesh", "netcheck", "pki", "codes"},
	"agent/fetched":                     {"agent/apitype", "agent/control", "agent/watch", "agent/statedir", "codes", "pki"},
	"agent/metrics":                     {"enroll", "codes"},
	"agent/fitness":                     {"codes"},
	"agent/pathup":                      {},
	"agent/localapi":                    {"agent/apitype", "codes"},
	"agent/statedir":                    {"enroll", "pki", "codes"},
	"agent/config":                      {"agent/control", "agent/raftnode", "enroll", "idtoken", "mesh", "names", "pki", "codes"},
	"agent/member":                      {"hostroute", "idtoken", "names", "names/resolved", "agent/config", "agent/fetched", "agent/fitness", "agent/metrics", "agent/pathup", "agent/statedir", "agent/control", "agent/desired", "agent/raftnode", "agent/state", "agent/apitype", "enroll", "gossip", "mesh", "netcheck", "pki", "codes", "crash"},
	"agent":                             {"agent/config", "agent/localapi", "agent/member", "agent/metrics", "agent/preflight", "agent/statedir", "agent/control", "agent/state", "agent/apitype", "enroll", "mesh", "pki", "codes", "crash"},
	"agent/agenttest":                   {"loopbacktest", "agent", "agent/config", "agent/state", "agent/apitype", "agent/localclient", "enroll", "pki", "codes"},
	"cmd/meshd":                         {"agent", "agent/config", "agent/apitype", "codes"},
	"cmd/meshctl":                       {"agent/localclient", "agent/apitype", "codes", "console", "enroll", "trust", "nebulabundle"},
	"console":                           {"agent/localclient", "agent/apitype", "codes"},
	"agent/localclient/localclienttest": {},
	"loopbacktest":                      {},
	"childtest":                         {},
	"stocknebula":                       {},
	"nebulabundle":                      {},
	"e2e":                               {"agent/apitype", "agent/localclient", "codes", "crash", "bench/benchrec", "stocknebula", "gossip/gossiptest"},
	"bench/benchrec":                    {},
	"bench/report":                      {"bench/benchrec"},
	"bench/nebulabaseline":              {},
	"bench/flaky":                       {},
}

// forbiddenInMeshctl must never be linked into meshctl.
var forbiddenInMeshctl = []string{
	"github.com/hashicorp/raft", "github.com/hashicorp/serf", "github.com/hashicorp/memberlist",
	"github.com/slackhq/nebula", "gvisor.dev/gvisor",
}

type listed struct {
	ImportPath string
	Imports    []string
	Deps       []string
	Standard   bool
}

func goList(t *testing.T, args ...string) []listed {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-json"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	var ps []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	return ps
}

func TestImportGraph(t *testing.T) {
	for _, p := range goList(t, "./...") {
		rel := strings.TrimPrefix(p.ImportPath, module)
		if p.ImportPath == strings.TrimSuffix(module, "/") {
			continue
		}
		ok, known := allowed[rel]
		if !known {
			t.Errorf("package %s has no place in the import graph (add it to allowed in deps_test.go)", rel)
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			dep := strings.TrimPrefix(imp, module)
			found := false
			for _, a := range ok {
				found = found || a == dep
			}
			if !found {
				t.Errorf("%s imports %s: against the one-way graph of DESIGN §2", rel, dep)
			}
		}
	}
}

// raftImporters may import hashicorp/raft itself: the raft node and the FSM
// it applies to. Everything else asks agent/raftnode.
var raftImporters = map[string]bool{"agent/raftnode": true, "agent/state": true}

func TestOnlyRaftNodeImportsRaft(t *testing.T) {
	for _, p := range goList(t, "./...") {
		rel := strings.TrimPrefix(p.ImportPath, module)
		for _, imp := range p.Imports {
			if imp == "github.com/hashicorp/raft" && !raftImporters[rel] {
				t.Errorf("%s imports github.com/hashicorp/raft; go through agent/raftnode", rel)
			}
		}
	}
}

func TestMeshctlLinksNoDaemonLibraries(t *testing.T) {
	ps := goList(t, "-deps", "./cmd/meshctl")
	for _, p := range ps {
		for _, bad := range forbiddenInMeshctl {
			if strings.HasPrefix(p.ImportPath, bad) {
				t.Errorf("meshctl links %s", p.ImportPath)
			}
		}
	}
}

// TestNebulaBundleLinksNoDaemonLibraries: nebulabundle stays linkable
// into meshctl (issue 35's `meshctl nebula-bundle` writes bundles), so it
// links nothing meshctl may not, Nebula's cert package included.
func TestNebulaBundleLinksNoDaemonLibraries(t *testing.T) {
	for _, p := range goList(t, "-deps", "./nebulabundle") {
		for _, bad := range forbiddenInMeshctl {
			if strings.HasPrefix(p.ImportPath, bad) {
				t.Errorf("nebulabundle links %s", p.ImportPath)
			}
		}
	}
}

// TestDepsGolden keeps cmd/*/deps.txt, the non-standard packages each binary
// links, so every new dependency is in front of a reviewer.
func TestDepsGolden(t *testing.T) {
	for _, cmd := range []string{"meshd", "meshctl"} {
		var deps []string
		for _, p := range goList(t, "-deps", "./cmd/"+cmd) {
			if !p.Standard && !strings.HasPrefix(p.ImportPath, module) {
				deps = append(deps, p.ImportPath)
			}
		}
		sort.Strings(deps)
		want := strings.Join(deps, "\n") + "\n"
		path := "cmd/" + cmd + "/deps.txt"
		if *updateDeps {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Errorf("%s is out of date; run go test -run TestDepsGolden . -update and review the change", path)
		}
	}
}

// TestReleaseHasNoCrashPoints builds meshd as `make build` does (no build
// tags) and fails if the crash points of the fault tests (package crash,
// tag crashpoints) are in it: the environment variable that arms them must
// not even be named in the shipped binary.
func TestReleaseHasNoCrashPoints(t *testing.T) {
	if testing.Short() {
		t.Skip("builds meshd")
	}
	bin := filepath.Join(t.TempDir(), "meshd")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./cmd/meshd")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"MESHD_CRASH_AT", "crash point "} {
		if bytes.Contains(b, []byte(s)) {
			t.Errorf("the release meshd contains %q: a crash point is compiled in", s)
		}
	}
}
