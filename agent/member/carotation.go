package member

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// CA rotation on the agent's side (docs/architecture.md, "CA rotation"):
// every node follows the trust bundles raft records (followCA) and
// reports what it runs in its gossip tag "ca" (runCAReports); the CA
// holder creates the next CA under ca/next/ (RotateCA) and finishes the
// rotation when nothing depends on the old CA (in the reconcile pass).

// notifyCA is the gossip notification that the CA trust bundles or the
// rotation's phase changed: workers fetch GET /v1/ca/bundle at once.
const notifyCA = "meshd-ca"

// tagCA is the gossip tag a node reports control.CAReport in; tagCASig
// holds its signature of that report (pki.Attest, kind pki.AttestCA,
// bound to its node id; unpadded base64), which the CA holder checks
// against the node's recorded TLS key: gossip carries the report but
// another member cannot forge it.
const (
	tagCA    = "ca"
	tagCASig = "cas"
)

// caNextDir is where the CA holder keeps the next CA's key pair during a
// rotation: the same files as ca/ (pki.CA.Save, pki.LoadCA).
const caNextDir = pki.CANextDir

// followCA brings this node's trust bundles in line with the cluster's
// (clusterFacts.CABundle: the FSM on a control node; GET /v1/ca/bundle on
// a worker, at once when told, otherwise at most every 5 s).
func (cf *caFollow) followCA(ctx context.Context, told bool) {
	b, ok := cf.cluster.CABundle(ctx, told)
	if !ok {
		return
	}
	cf.mu.Lock()
	changed := cf.signing.Phase != b.Phase || cf.signing.SigningCA != b.SigningCA
	cf.signing = b
	cf.mu.Unlock()
	if changed {
		select {
		case cf.wake <- struct{}{}:
		default:
		}
	}
	cf.adoptBundle(b.TLS, b.Nebula)
}

// adoptBundle makes tlsBundle and nebulaBundle this node's trust: saved
// in the identity (tls/ca.crt, nebula/ca.crt), swapped into the live
// identity (every TLS handshake from now on), and the reconcile pass
// reloads Nebula with the new pki.ca.
func (cf *caFollow) adoptBundle(tlsBundle, nebulaBundle []byte) {
	if len(tlsBundle) == 0 || len(nebulaBundle) == 0 {
		return
	}
	cf.idMu.Lock()
	defer cf.idMu.Unlock()
	own := cf.identity()
	if bytes.Equal(own.CACert, tlsBundle) && bytes.Equal(own.NebulaCACert, nebulaBundle) {
		return
	}
	if cas, err := pki.BundleCerts(tlsBundle); err != nil || len(cas) == 0 {
		cf.log.Warn("CA bundle refused: unreadable", "code", codes.CertRefused, "err", err)
		return
	}
	id := *own
	id.CACert, id.NebulaCACert = bytes.Clone(tlsBundle), bytes.Clone(nebulaBundle)
	if leaf, err := id.Leaf(); err == nil && pki.IssuerIn(id.CACert, leaf) == nil {
		cf.log.Warn("the new CA bundle does not hold the CA of this node's TLS leaf", "code", codes.CertRefused)
	}
	if err := pki.SaveTrustBundles(filepath.Join(cf.stateDir, statedir.IdentityDir), id.CACert, id.NebulaCACert); err != nil {
		cf.log.Warn("CA bundle not saved", "code", codes.StateDir, "err", err)
		return
	}
	if err := cf.live.Swap(&id); err != nil {
		cf.log.Warn("CA bundle not adopted", "code", codes.Internal, "err", err)
		return
	}
	cf.saveHeld() // the held leaf goes when its CA leaves the bundle
	cas, _ := pki.BundleCerts(tlsBundle)
	cf.log.Info("adopted the cluster's CA bundle", "code", codes.EventCARotated, "cas", len(cas),
		"bundle", pki.BundleID(tlsBundle, nebulaBundle))
	cf.client.CloseIdle()
	cf.poke()
	cf.wakeCAReport()
}

// reissuePending reports whether a worker's certificate is to be fetched
// again although it is not due: the CA holder signs with another CA than
// the one that issued it (a CA rotation reissues every certificate).
func (cf *caFollow) reissuePending(nebula bool) bool {
	cf.mu.Lock()
	b := cf.signing
	cf.mu.Unlock()
	if b.Phase != state.CAPhaseReissue {
		return false
	}
	own := cf.identity()
	if nebula {
		is, err := pki.NebulaIssuer(own.NebulaCert)
		return err == nil && is != b.SigningNebulaCA
	}
	leaf, err := own.Leaf()
	if err != nil {
		return false
	}
	ca := pki.IssuerIn(own.CACert, leaf)
	return ca != nil && pki.FingerprintOf(ca).String() != b.SigningCA
}

func (cf *caFollow) wakeCAReport() {
	select {
	case cf.report <- struct{}{}:
	default:
	}
}

// runCAReports keeps this node's gossip tag "ca" equal to what it runs
// (control.CAReport of running()), in a goroutine of its own for the
// reason runKeyReports gives. It looks when woken (a CA bundle adopted),
// when pathWake rings (the overlay applied a config, so perhaps a
// certificate of another CA: pathwake.go), a second after a report that
// failed, and every caReportCheck as a safety net. It used to look every
// second (issue 54).
func (cf *caFollow) runCAReports(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		wake := cf.pathWake.wait()
		select {
		case <-ctx.Done():
			return
		case <-cf.report:
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
		if cf.reportCA() {
			timer.Reset(caReportCheck)
		} else {
			timer.Reset(time.Second)
		}
	}
}

// caReportCheck is how often runCAReports looks though nothing woke it.
const caReportCheck = 30 * time.Second

// reportCA makes the tags say what this node runs; false when that
// failed (tried again a second later).
func (cf *caFollow) reportCA() bool {
	id := cf.ov.running()
	want := cf.reported.get(func() string { return control.CAReport(id) }, id.CACert, id.Cert, id.NebulaCACert, id.NebulaCert)
	cf.factsOut.offer(want) // and by the internal API (factreport.go)
	if cf.gossip == nil {   // out of the gossip pool (outofpool.go): the internal API alone
		return true
	}
	tags := cf.gossip.LocalMember().Tags
	if tags[tagCA] == want && tags[tagCASig] != "" {
		return true
	}
	sig, err := cf.identity().Attest(pki.AttestCA, []byte(cf.facts.NodeID), control.CAStatement(want))
	if err != nil {
		cf.log.Warn("CA report not signed", "code", codes.OrInternal(err), "err", err)
		return false
	}
	if err := cf.gossip.UpdateTags(map[string]string{tagCA: want, tagCASig: base64.RawStdEncoding.EncodeToString(sig)}); err != nil {
		cf.log.Warn("CA report not gossiped, or its broadcast not confirmed", "ca", want, "err", err)
		return false
	}
	return true
}

// finishCARotation, on the CA holder, drops the old CA once nothing
// depends on it, and tidies ca/ afterwards (a control duty).
func (cf *caFollow) finishCARotation(ctx context.Context) {
	if !cf.ctl.HoldsCA() {
		return
	}
	if _, err := cf.ctl.FinishCARotation(ctx, ""); err != nil {
		cf.log.Warn("CA rotation not finished", "code", codes.OrInternal(err), "err", err)
	}
	cf.tidyCADir()
}

// tidyCADir moves ca/next/ into ca/ once raft records the next CA as the
// current one (and again at every pass while ca/next/ is there). Signing
// never depends on it (the holder picks the key pair by fingerprint), so a
// crash in the middle loses nothing: at start a ca/ that does not load
// falls back to ca/next/ (loadCAs), and the next pass completes ca/.
func (cf *caFollow) tidyCADir() {
	cl, ok := cf.ctl.Raft().FSM().Cluster()
	if !ok || cl.Rotation != nil {
		return
	}
	dir := filepath.Join(cf.stateDir, statedir.CADir)
	nextDir := filepath.Join(dir, caNextDir)
	if _, err := os.Stat(nextDir); err != nil {
		return
	}
	next, err := pki.LoadCA(nextDir)
	if err != nil || next.Fingerprint().String() != cl.CAFingerprint {
		return // an unused next of a rotation that never began, or not ours to move
	}
	if err := next.Save(dir); err != nil {
		cf.log.Warn("could not move ca/next into ca", "code", codes.StateDir, "err", err)
		return
	}
	if err := os.RemoveAll(nextDir); err != nil {
		cf.log.Warn("could not remove ca/next", "code", codes.StateDir, "err", err)
		return
	}
	cf.log.Info("the rotated CA's keys are now ca/", "ca", pki.ShortID(cl.CAFingerprint))
}

// loadCAs loads the CA holder's key pairs: ca/, and ca/next/ when a
// rotation left one (pki.LoadCAKeys: a ca/ that does not load while
// ca/next/ does is read from ca/next/ alone, and left as it is on disk;
// tidyCADir completes ca/ once raft confirms the next CA is the current
// one; signing picks the key pair by the fingerprint raft names).
func loadCAs(stateDir string) (cur, next *pki.CA, err error) {
	return pki.LoadCAKeys(filepath.Join(stateDir, statedir.CADir))
}

// reissueWatch reports whether a worker should look at its TLS leaf again
// soon: a CA rotation is in progress.
func (cf *caFollow) reissueWatch() bool {
	cf.mu.Lock()
	defer cf.mu.Unlock()
	return cf.signing.Phase != "" && cf.signing.Phase != state.CAPhaseNone
}

// saveHeld keeps the leaf the live identity holds under the old CA of a
// rotation in identity/tls/held.crt, or removes the file when it holds
// none, so a restarted control node still answers a token minted before
// the rotation (loadHeld).
func (cf *caFollow) saveHeld() {
	p := filepath.Join(cf.stateDir, statedir.IdentityDir, pki.HeldLeafFile)
	held := cf.live.HeldLeaves()
	if len(held) == 0 {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			cf.log.Warn("could not remove the held TLS leaf", "code", codes.StateDir, "err", err)
		}
		return
	}
	if err := pki.WriteFileAtomic(p, held[0], 0o644); err != nil {
		cf.log.Warn("could not save the held TLS leaf", "code", codes.StateDir, "err", err)
	}
}

// loadHeld gives the live identity back the leaf saveHeld kept; one whose
// CA has left the bundle meanwhile is dropped with its file.
func loadHeld(dir string, live *pki.LiveIdentity, log interface{ Warn(string, ...any) }) {
	p := filepath.Join(dir, statedir.IdentityDir, pki.HeldLeafFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err == nil {
		err = live.Hold(b)
	}
	if err != nil {
		log.Warn("held TLS leaf not taken back; removing it", "err", err)
		_ = os.Remove(p)
	}
}

// running is the identity as this node uses it now: the TLS side from the
// live identity (every handshake takes it), the Nebula side from the
// config Nebula last applied, so a node reports trusting a Nebula CA only
// once its Nebula does (a reload can lag the identity, or be refused).
func (ov *overlay) running() *pki.Identity {
	id := *ov.identity()
	if applied := ov.applied(); len(applied.CACert) > 0 {
		id.NebulaCACert, id.NebulaCert = applied.CACert, applied.Cert
	}
	return &id
}
