//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// TestCABackupRestore (issue 13 item 3): a sealed backup on the holder
// (recorded, shown by status); restore refused while the holder lives,
// with a wrong passphrase, a truncated file and another cluster's file;
// then the holder is killed and its state deleted, the backup restored on
// c2, and a worker admitted through c3 joins with c2 signing.
func TestCABackupRestore(t *testing.T) {
	n := NewNet(t)
	ns := custodyCluster(t, n, "", "c2", "c3")
	c1, c2, c3 := ns[0], ns[1], ns[2]
	dir := t.TempDir()
	pass, wrong, short := filepath.Join(dir, "pass"), filepath.Join(dir, "wrong"), filepath.Join(dir, "short")
	for f, p := range map[string]string{pass: "a long enough passphrase\n", wrong: "another long passphrase\n", short: "short\n"} {
		if err := os.WriteFile(f, []byte(p), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	backup := filepath.Join(dir, "ca.age")

	wantCode(t, c2, codes.NotCAHolder, "ca", "backup", "--out", backup, "--passphrase-file", pass)
	wantCode(t, c1, codes.CAPassphrase, "ca", "backup", "--out", backup, "--passphrase-file", short)
	if st, _ := statusOf(c1); !st.CABackedUp.IsZero() {
		t.Fatal("a backup time before any backup")
	}
	c1.MustCtl(t, "ca", "backup", "--out", backup, "--passphrase-file", pass)
	st, err := os.Stat(backup)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("backup file: %v %v", st, err)
	}
	b, _ := os.ReadFile(backup)
	key, _ := os.ReadFile(filepath.Join(c1.Dir, "ca", "ca.key"))
	if strings.Contains(string(b), "PRIVATE KEY") || len(key) == 0 || strings.Contains(string(b), string(key[30:60])) {
		t.Fatal("the backup file shows the key")
	}
	// The backup's record is a raft write, forwarded to the leader when
	// c1 does not lead, and status reads c1's own raft state, which
	// applies it a heartbeat later: wait for it there.
	Eventually(t, 10*time.Second, "status on the holder shows the backup time", func() error {
		if s, err := statusOf(c1); err != nil || s.CABackedUp.IsZero() {
			return fmt.Errorf("no backup time (%v)", err)
		}
		return nil
	})
	if text := c1.MustCtl(t, "status"); !strings.Contains(text, "last backup") {
		t.Fatalf("status text has no backup time:\n%s", text)
	}
	if lb, _ := os.ReadFile(c1.LogPath); strings.Contains(string(lb), "a long enough passphrase") {
		t.Fatal("the passphrase is in c1's log")
	}

	// Another cluster's backup.
	x := n.NewNode("x1")
	x.Start(t)
	x.MustCtl(t, "init", "--cluster", "other")
	foreign := filepath.Join(dir, "other.age")
	x.MustCtl(t, "ca", "backup", "--out", foreign, "--passphrase-file", pass)
	truncated := filepath.Join(dir, "cut.age")
	if err := os.WriteFile(truncated, b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}

	wantCode(t, c2, codes.CAHolderAlive, "ca", "restore", backup, "--passphrase-file", pass)
	wantCode(t, c2, codes.BackupPassphrase, "ca", "restore", backup, "--passphrase-file", wrong)
	wantCode(t, c2, codes.CAOtherCluster, "ca", "restore", foreign, "--passphrase-file", pass)
	wantCode(t, c2, codes.BackupCorrupt, "ca", "restore", truncated, "--passphrase-file", pass)
	holderIs(t, c1, ns...)
	if caCopy(t, c2) {
		t.Fatal("a refused restore left keys on c2")
	}

	// Lose the holder's disk.
	c1.Kill()
	if err := os.RemoveAll(c1.Dir); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 30*time.Second, "c1 failed in c2's gossip", func() error {
		row, ok := nodeRowErr(c2, "c1")
		if !ok || row.Gossip == "alive" || row.Gossip == "suspect" {
			return fmt.Errorf("c1: %+v", row)
		}
		return nil
	})
	var r apitype.CACustody
	if err := c2.CtlJSON(t.Context(), &r, "ca", "restore", backup, "--passphrase-file", pass); err != nil {
		t.Fatal(err)
	}
	if r.From != "c1" || r.To != "c2" {
		t.Fatalf("restore: %+v", r)
	}
	holderIs(t, c2, c2, c3)
	var events []apitype.AuditEvent
	if err := c3.CtlJSON(t.Context(), &events, "audit"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range events {
		if strings.HasPrefix(e.Event, "ca ") {
			got = append(got, e.Event+" "+e.Subject)
		}
	}
	if strings.Join(got, ",") != "ca backup c1,ca restore c2" {
		t.Fatalf("custody events in c3's audit: %v", got)
	}
	if !caCopy(t, c2) {
		t.Fatal("no keys on c2 after the restore")
	}
	before := signedCount(c2)
	joinWorker(t, n, c3, "w1")
	if signedCount(c2) <= before {
		t.Fatal("c2 did not sign w1's admission")
	}
	// The lost holder is removed like any dead control node.
	c2.MustCtl(t, "remove", "c1")
	if row, ok := nodeRowErr(c3, "c1"); ok && row.State == "active" {
		t.Fatalf("c1 after remove: %+v", row)
	}
}
