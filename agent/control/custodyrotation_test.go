package control

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

const custodyPass = "a long enough passphrase"

// TestHandoffDuringRotation: CA custody and CA rotation together. A
// rotation begun on the origin stops in phase trust (w1 silent); a backup
// taken then seals the next CA too; the handoff to c2 moves both key
// pairs (c2 proves each; a handoff without the next pair is refused by
// the target), the origin releases both and can no longer drive the
// rotation; c2, the holder on record, resumes it (--now) and finishes it,
// signs with the next CA and keeps only it. A restore on c2 of the backup
// taken during the rotation puts back both pairs while it runs; one taken
// before the rotation is refused (CABackupNoNext); after the finish the
// backup taken during the rotation restores its next CA as the current one.
func TestHandoffDuringRotation(t *testing.T) {
	c := &testCluster{ca: pkitest.NewCA(t, "alpha"), promote: 3 * time.Second, keyStep: 600 * time.Millisecond}
	origin := c.bootstrap(t, nil)
	c2 := c.joinControl(t, origin, "c2")
	c.admit(t, origin, "w1", pki.RoleWorker, nil, enroll.Ports{})
	pass := []byte(custodyPass)
	before, _, err := origin.p.Backup(within(t, 10*time.Second), pass, "test")
	if err != nil {
		t.Fatal(err)
	}

	following := runsRecord(c2)
	origin.hooks.mu.Lock()
	origin.hooks.reports = func() []KeyReport { // w1 never adopts the bundle
		r := following()
		r[2].CA = "00000000.-.-"
		return r
	}
	origin.hooks.mu.Unlock()
	next := pkitest.NewCA(t, "alpha")
	if _, err := origin.p.RotateCA(within(t, 10*time.Second), next, true, "uid:0"); codes.Of(err) != codes.CARotationStalled {
		t.Fatalf("rotation with w1 silent: %v, want %s", err, codes.CARotationStalled)
	}
	during, _, err := origin.p.Backup(within(t, 10*time.Second), pass, "test")
	if err != nil {
		t.Fatal(err)
	}
	if b, _, err := pki.OpenCABackup(during, pass); err != nil || b.NextCAFingerprint != next.Fingerprint().String() || b.Next == nil {
		t.Fatalf("a backup during the rotation does not seal the next CA: %v", err)
	}

	// The target refuses the current pair alone while a rotation runs.
	cl, _ := origin.p.Raft().FSM().Cluster()
	if err := c2.p.SyncRead(within(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	curBundle, _ := c.ca.Bundle()
	nonce := []byte("0123456789abcdef0123456789abcdef")
	if _, err := c2.p.receiveCA(within(t, 5*time.Second), Caller{NodeID: origin.nodeID, Name: "origin", Role: pki.RoleControl},
		CAReceive{CA: curBundle, Nonce: nonce}); codes.Of(err) != codes.BadRequest || hasCADir(c2) {
		t.Fatalf("receive without the next CA during a rotation: %v (ca dir written: %v)", err, hasCADir(c2))
	}

	h, err := origin.p.Handoff(within(t, 10*time.Second), "c2", "uid=0@origin")
	if err != nil {
		t.Fatal(err)
	}
	if !h.Released || !c2.p.HoldsCA() || origin.p.HoldsCA() || hasCADir(origin) {
		t.Fatalf("handoff during the rotation: %+v, c2 holds %v, origin holds %v, origin ca dir %v", h, c2.p.HoldsCA(), origin.p.HoldsCA(), hasCADir(origin))
	}
	if c2.p.CAByFingerprint(next.Fingerprint().String()) == nil || c2.p.CAByFingerprint(cl.CAFingerprint) == nil {
		t.Fatal("c2 lacks a key pair of the rotation after the handoff")
	}
	if loaded, err := pki.LoadCA(filepath.Join(c2.p.cfg.CADir, pki.CANextDir)); err != nil || loaded.Fingerprint() != next.Fingerprint() {
		t.Fatalf("c2's ca/next: %v", err)
	}
	// The probe the old holder's release asks for proves both pairs.
	if err := origin.p.SyncRead(within(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	cl, _ = origin.p.Raft().FSM().Cluster()
	if err := origin.p.probeHolder(within(t, 5*time.Second), cl); err != nil {
		t.Fatalf("probe of c2 during the rotation: %v", err)
	}
	if _, err := origin.p.RotateCA(within(t, 5*time.Second), nil, true, "uid:0"); codes.Of(err) != codes.NotCAHolder {
		t.Fatalf("rotate on the old holder: %v, want %s", err, codes.NotCAHolder)
	}

	// A restore on the holder whose keys are gone: the backup taken
	// before the rotation lacks the next pair, the one taken during it
	// puts both back.
	c2.p.setCA(nil)
	if err := os.RemoveAll(c2.p.cfg.CADir); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.p.Restore(within(t, 10*time.Second), before, pass, "test"); codes.Of(err) != codes.CABackupNoNext {
		t.Fatalf("restore of a backup from before the rotation: %v, want %s", err, codes.CABackupNoNext)
	}
	if _, err := c2.p.Restore(within(t, 10*time.Second), during, pass, "test"); err != nil {
		t.Fatal(err)
	}
	if c2.p.CAByFingerprint(next.Fingerprint().String()) == nil || !c2.p.HoldsCA() {
		t.Fatal("the restore did not bring back the next CA's key pair")
	}

	if done, err := origin.p.FinishCARotation(within(t, 5*time.Second), ""); done || err != nil {
		t.Fatalf("finish on the old holder: done %v, err %v", done, err)
	}
	// c2 resumes the rotation and finishes it.
	c2.hooks.mu.Lock()
	c2.hooks.reports = following
	c2.hooks.mu.Unlock()
	st, err := c2.p.RotateCA(within(t, 15*time.Second), nil, true, "uid:0")
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != "none" && st.Phase != "reissue" {
		t.Fatalf("after the resumed rotation: %+v", st)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		done, err := c2.p.FinishCARotation(within(t, 5*time.Second), "")
		if err == nil && done {
			break
		}
		if time.Now().After(deadline) {
			st, _ := c2.p.CAStatus(within(t, 5*time.Second))
			t.Fatalf("c2 did not finish the rotation within 10 s: %v, %+v", err, st)
		}
	}
	cl, _ = c2.p.Raft().FSM().Cluster()
	if cl.CAFingerprint != next.Fingerprint().String() || cl.Rotation != nil {
		t.Fatalf("after finish: CA %s, rotation %+v", pki.ShortID(cl.CAFingerprint), cl.Rotation)
	}
	if got := c2.p.ca.Load(); got == nil || got.Fingerprint() != next.Fingerprint() || c2.p.CAByFingerprint(c.ca.Fingerprint().String()) != nil {
		t.Fatal("c2 still holds the old CA's key pair after the finish")
	}
	c.admit(t, origin, "w2", pki.RoleWorker, nil, enroll.Ports{})
	// origin may be a follower by now: read its record after the leader's.
	if err := origin.p.SyncRead(within(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n, _ := origin.p.Raft().FSM().NodeByName("w2"); !pki.IssuedBy(next.CertPEM(), n.TLSCert) {
		t.Fatal("an admission after the rotation was not signed by the rotated CA")
	}
	// After the finish, the backup taken during the rotation restores its
	// next CA as the cluster's CA.
	c2.p.setCA(nil)
	if err := os.RemoveAll(c2.p.cfg.CADir); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.p.Restore(within(t, 10*time.Second), during, pass, "test"); err != nil {
		t.Fatal(err)
	}
	if got := c2.p.heldCA(); got == nil || got.Fingerprint() != next.Fingerprint() {
		t.Fatal("the restore after the finish did not load the rotated CA")
	}
	if _, err := os.Stat(filepath.Join(c2.p.cfg.CADir, pki.CANextDir)); err == nil {
		t.Fatal("a ca/next left after a restore outside a rotation")
	}
}

// TestFinishCARotationOnce: the reconcile pass and `ca rotate --now` may
// finish a rotation at the same moment on the CA holder; both see it
// finished, neither gets the FSM's refusal of a second finish
// (BadRequest). Found by the e2e set.
func TestFinishCARotationOnce(t *testing.T) {
	c, origin := newCluster(t)
	c.admit(t, origin, "w1", pki.RoleWorker, nil, enroll.Ports{})
	origin.hooks.mu.Lock()
	origin.hooks.reports = runsRecord(origin)
	origin.hooks.mu.Unlock()
	next := pkitest.NewCA(t, "alpha")
	if _, err := origin.p.RotateCA(within(t, 10*time.Second), next, false, "uid:0"); err != nil {
		t.Fatal(err)
	}
	origin.p.reissueAll(within(t, 10*time.Second))
	waitFor(t, 5*time.Second, "every certificate reissued", func() bool {
		return len(origin.p.Raft().FSM().OldDependents()) == 0
	})
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			done, err := origin.p.FinishCARotation(within(t, 10*time.Second), "")
			if err == nil && !done {
				err = errors.New("not finished")
			}
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent finish: %v", err)
		}
	}
}
