package agenttest_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/codes"
)

// treeDigest maps every regular file under dir (but meshd.pid and the serf
// snapshot, which a start rewrites) to its sha256.
func treeDigest(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	m := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if rel == "meshd.pid" || strings.HasPrefix(rel, "serf"+string(filepath.Separator)) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		m[rel] = sha256.Sum256(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCorruptStateFiles: a truncated or garbled node.json, identity file,
// CA file or raft.db of a control node (the CA holder) stops meshd at
// start with codes.StateCorrupt naming the file; meshd changes nothing in
// the state dir (no re-initialisation, the CA keys stay), and with the
// file restored the node starts as before. A garbled serf snapshot is
// moved aside and rebuilt, and the log says so.
func TestCorruptStateFiles(t *testing.T) {
	p := agenttest.NewProc(t, "solo")
	p.Start(t)
	if r := p.Ctl(t, "init", "--cluster", "alpha"); r.Exit != 0 {
		t.Fatalf("init: %s", r.Stderr)
	}
	p.Stop(t)
	meshd, _ := agenttest.Binaries(t)

	truncate := func(b []byte) []byte { return b[:len(b)/2] }
	garble := func(b []byte) []byte {
		b = bytes.Clone(b)
		for i := len(b) / 3; i < len(b)/3+16 && i < len(b); i++ {
			b[i] ^= 0x5a
		}
		return b
	}
	// bbolt keeps checksums on its two meta pages only: garbling both is
	// the damage it can see (a flipped byte in a data page it cannot).
	garbleMetas := func(b []byte) []byte {
		b = bytes.Clone(b)
		for _, off := range []int{16, 4096 + 16} {
			for i := off; i < off+16; i++ {
				b[i] ^= 0x5a
			}
		}
		return b
	}
	files := []string{
		"node.json",
		"identity/tls/node.key", "identity/tls/node.crt", "identity/tls/ca.crt",
		"identity/nebula/host.key", "identity/nebula/host.crt", "identity/nebula/ca.crt",
		"ca/ca.key", "ca/ca.crt", "ca/nebula-ca.key", "ca/nebula-ca.crt",
		"raft/raft.db",
	}
	for _, rel := range files {
		damages := map[string]func([]byte) []byte{"truncated": truncate, "garbled": garble}
		if rel == "raft/raft.db" {
			// Cut after the two meta pages: the pages they point to are
			// gone (half of the file can hold every live page).
			damages["truncated"] = func(b []byte) []byte { return b[:8192] }
			damages["garbled"] = garbleMetas
		}
		for how, damage := range damages {
			t.Run(rel+"/"+how, func(t *testing.T) {
				path := filepath.Join(p.Dir, rel)
				orig, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				st, _ := os.Stat(path)
				if err := os.WriteFile(path, damage(orig), st.Mode().Perm()); err != nil {
					t.Fatal(err)
				}
				defer func() {
					if err := os.WriteFile(path, orig, st.Mode().Perm()); err != nil {
						t.Fatal(err)
					}
				}()
				before := treeDigest(t, p.Dir)
				ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
				defer cancel()
				out, err := exec.CommandContext(ctx, meshd, "--config", p.Config).CombinedOutput()
				if ctx.Err() != nil {
					t.Fatalf("meshd started on a %s %s:\n%s", how, rel, tail(out))
				}
				var ee *exec.ExitError
				if !errorsAs(err, &ee) || ee.ExitCode() != 1 {
					t.Fatalf("meshd exit %v, want 1:\n%s", err, tail(out))
				}
				last := string(out[bytes.LastIndex(out, []byte(string(codes.StateCorrupt)+": ")):])
				if !strings.HasPrefix(last, string(codes.StateCorrupt)) {
					t.Fatalf("no %s in the output:\n%s", codes.StateCorrupt, tail(out))
				}
				if !strings.Contains(last, filepath.Dir(path)) || !strings.Contains(last, filepath.Base(path)) {
					t.Fatalf("the refusal does not name %s:\n%s", path, last)
				}
				if !strings.Contains(last, "Never delete ca/") {
					t.Fatalf("the refusal has no remedy:\n%s", last)
				}
				after := treeDigest(t, p.Dir)
				if len(after) != len(before) {
					t.Fatalf("meshd changed the state dir's files: %d before, %d after", len(before), len(after))
				}
				for f, h := range before {
					if after[f] != h {
						t.Fatalf("meshd changed %s", f)
					}
				}
			})
		}
	}

	t.Run("serf-snapshot/garbled", func(t *testing.T) {
		snap := filepath.Join(p.Dir, "serf", "snapshot")
		orig, err := os.ReadFile(snap)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(snap, append(garble(orig), []byte("alive: x\x00y not-an-address\n")...), 0o600); err != nil {
			t.Fatal(err)
		}
		p.Start(t)
		if r := p.Ctl(t, "status"); r.Exit != 0 || !strings.Contains(r.Stdout, "alpha") {
			t.Fatalf("status after a corrupt serf snapshot: %s%s", r.Stdout, r.Stderr)
		}
		if !strings.Contains(p.Log(), "serf snapshot is corrupt; moved aside") || !strings.Contains(p.Log(), string(codes.StateCorrupt)) {
			t.Fatalf("the log does not say the snapshot was rebuilt:\n%s", p.Log())
		}
		if _, err := os.Stat(snap + ".corrupt"); err != nil {
			t.Fatalf("the corrupt snapshot was not kept aside: %v", err)
		}
		agenttest.WaitFor(t, t.Context(), 10*time.Second, func() error {
			b, err := os.ReadFile(snap)
			if err != nil || !bytes.Contains(b, []byte("alive: solo ")) {
				return fmt.Errorf("no new serf snapshot naming solo: %v %q", err, b)
			}
			return nil
		})
		p.Stop(t)
	})

	// With every file back, the node starts as it was.
	p.Start(t)
	if r := p.Ctl(t, "status"); r.Exit != 0 || !strings.Contains(r.Stdout, "alpha") {
		t.Fatalf("status after restoring the files: %s%s", r.Stdout, r.Stderr)
	}
	if r := p.Ctl(t, "admit", "w9"); r.Exit != 0 {
		t.Fatalf("the CA holder cannot admit after restoring its files: %s", r.Stderr)
	}
}

func tail(b []byte) string {
	if len(b) > 1500 {
		b = b[len(b)-1500:]
	}
	return string(b)
}
