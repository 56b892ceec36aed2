//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// currentVersion is the main.version TestMain builds the current meshd and
// meshctl with, so a mixed cluster tells them from the previous release's.
const currentVersion = "current"

// previousRelease is the commit named in testdata/previous-release.
func previousRelease() (string, error) {
	b, err := os.ReadFile("testdata/previous-release")
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			return l, nil
		}
	}
	return "", fmt.Errorf("testdata/previous-release names no commit")
}

// haveCommit fails, naming the remedy, unless repo holds commit (a shallow
// clone does not hold the history before its tip).
func haveCommit(repo, commit string) error {
	if out, err := exec.Command("git", "-C", repo, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		return fmt.Errorf("previous release %s is not in %s (a shallow clone?): run `git fetch --unshallow` "+
			"(e2e/testdata/previous-release names the commit): %v %s", commit, repo, err, bytes.TrimSpace(out))
	}
	return nil
}

// prevBuild is the previous release's meshd and meshctl and the version
// they carry (the commit's short hash).
type prevBuild struct {
	Meshd, Meshctl, Version string
}

// previousBin builds, once per test binary run, meshd and meshctl of the
// previous release: `git archive COMMIT` of the repository the test runs
// in, unpacked into a temporary directory and built there with the flags
// TestMain uses (the module cache is shared, so nothing is downloaded). A
// repository without the commit (a shallow clone) fails with the remedy.
var previousBin = sync.OnceValues(func() (prevBuild, error) {
	commit, err := previousRelease()
	if err != nil {
		return prevBuild{}, err
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return prevBuild{}, fmt.Errorf("previous release: not in a git repository: %v", err)
	}
	repo := strings.TrimSpace(string(top))
	if err := haveCommit(repo, commit); err != nil {
		return prevBuild{}, err
	}
	src := filepath.Join(binDir, "previous-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return prevBuild{}, err
	}
	archive := exec.Command("bash", "-c", `set -o pipefail; git -C "$0" archive "$1" | tar -x -C "$2"`, repo, commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return prevBuild{}, fmt.Errorf("git archive %s: %v\n%s", commit, err, out)
	}
	b := prevBuild{Meshd: filepath.Join(binDir, "meshd-prev"), Meshctl: filepath.Join(binDir, "meshctl-prev"), Version: commit[:7]}
	for bin, pkg := range map[string]string{b.Meshd: "./cmd/meshd", b.Meshctl: "./cmd/meshctl"} {
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+b.Version, "-o", bin, pkg)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return prevBuild{}, fmt.Errorf("build %s of %s: %v\n%s", pkg, commit, err, out)
		}
	}
	return b, nil
})

// TestPreviousReleaseInShallowClone: in a shallow clone, which lacks the
// previous release's commit, the upgrade test's build fails (it does not
// skip) and says to run `git fetch --unshallow`; in the full repository
// the commit is there.
func TestPreviousReleaseInShallowClone(t *testing.T) {
	commit, err := previousRelease()
	if err != nil {
		t.Fatal(err)
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatal(err)
	}
	repo := strings.TrimSpace(string(top))
	if err := haveCommit(repo, commit); err != nil {
		t.Fatalf("this repository: %v", err)
	}
	shallow := filepath.Join(t.TempDir(), "shallow")
	if out, err := exec.Command("git", "clone", "-q", "--depth", "1", "--no-checkout", "file://"+repo, shallow).CombinedOutput(); err != nil {
		t.Fatalf("git clone --depth 1: %v\n%s", err, out)
	}
	if tip, _ := exec.Command("git", "-C", shallow, "rev-parse", "HEAD").Output(); strings.TrimSpace(string(tip)) == commit {
		t.Logf("the clone's tip is the previous release itself (%s): nothing to miss", commit)
		return
	}
	err = haveCommit(shallow, commit)
	if err == nil || !strings.Contains(err.Error(), "git fetch --unshallow") {
		t.Fatalf("shallow clone: %v, want a failure naming git fetch --unshallow", err)
	}
}
