package control

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// CA custody (issue 13). Exactly one node holds the CA keys, and raft's
// cluster record names it (Cluster.CAHolder). Custody moves only through
// state.SetCAHolder, written after the new holder holds working keys
// (handoff: it signed a probe the old holder verified; restore: it wrote
// and loaded the keys itself). Signing follows the record: a node signs
// only while the record names it (heldCA), so the moment the record moves
// the old holder stops. A node releases (deletes) a CA copy only when the
// record, read after a read index, names another node, and that node
// proves over mTLS that it holds working keys; and never a copy whose
// marker names the holder on record (the keys of a handoff in flight, or
// of one that died before its record: kept, unused, until a re-run
// finishes the move or custody moves elsewhere).

// The custody routes (control nodes only).
const (
	PathCAReceive = "/v1/ca/receive"
	PathCAProbe   = "/v1/ca/probe"
)

// CAReceive is the handoff's request to the target: the CA keys and the
// nonce to sign with them.
type CAReceive struct {
	CA pki.CABundle `json:"ca"`
	// Next is the next CA of a rotation in progress (nil outside one).
	Next  *pki.CABundle `json:"next,omitempty"`
	Nonce []byte        `json:"nonce"`
}

// CAProbeRequest asks the CA holder to sign a nonce.
type CAProbeRequest struct {
	Nonce []byte `json:"nonce"`
}

// CAProbeAnswer is a signed probe.
type CAProbeAnswer struct {
	Probe pki.Probe `json:"probe"`
	// Next is the probe signed with the next CA of a rotation in
	// progress (cakeys.go); nil outside one.
	Next *pki.Probe `json:"next,omitempty"`
}

// Handoff is the outcome of a custody move.
type Handoff struct {
	From, To string // node names
	// Already: the record named To before this call (a re-run after the
	// move was recorded); this node only released its copy.
	Already bool
	// Released: this node deleted its CA copy. False with ReleaseErr
	// when the move is recorded but the copy is still here (a later
	// reconcile pass deletes it).
	Released   bool
	ReleaseErr error
	Took       time.Duration
}

// setCA installs ca as this node's CA keys, without a next CA (nil drops
// them all).
func (p *Plane) setCA(ca *pki.CA) { p.setCAs(ca, nil) }

// heldCA is the CA this node signs with: its keys, while raft's cluster
// record names it the holder; nil otherwise.
func (p *Plane) heldCA() *pki.CA {
	ca := p.ca.Load()
	if ca == nil {
		return nil
	}
	if c, ok := p.raft.FSM().Cluster(); !ok || c.CAHolder != p.cfg.NodeID {
		return nil
	}
	return ca
}

// followSigner is the enroll server's signer: the CA while this node
// holds it on record, the forwarder to the holder on record otherwise,
// decided at every call.
type followSigner struct{ p *Plane }

var _ enroll.Signer = followSigner{}

func (s followSigner) SignTLS(ctx context.Context, req enroll.SignRequest) ([]byte, error) {
	if s.p.heldCA() != nil {
		return caSigner(s).SignTLS(ctx, req)
	}
	return remoteSigner(s).SignTLS(ctx, req)
}

func (s followSigner) SignNebula(ctx context.Context, req enroll.SignRequest) ([]byte, error) {
	if s.p.heldCA() != nil {
		return caSigner(s).SignNebula(ctx, req)
	}
	return remoteSigner(s).SignNebula(ctx, req)
}

// caDirExists reports whether this node has a CA directory.
func (p *Plane) caDirExists() bool {
	if p.cfg.CADir == "" {
		return false
	}
	_, err := os.Stat(p.cfg.CADir)
	return err == nil
}

// FollowCustody brings this node's CA copy in line with the record, and
// reports whether this node holds the CA on record with its keys loaded.
// The record names this node: load the keys if they are not loaded, and
// clear the copy's marker. It names another: release this node's copy,
// if it has one, unless the copy's marker names the holder on record;
// release only after a read index and once the holder on record proved
// it holds working keys. The reconcile loop runs it on every pass.
// ErrCustodyUnknown: no record yet, nothing done.
func (p *Plane) FollowCustody(ctx context.Context) (bool, error) {
	p.custody.Lock()
	defer p.custody.Unlock()
	return p.followCustody(ctx)
}

// ErrCustodyUnknown is FollowCustody's answer while this node's FSM has
// no cluster record yet (raft has not replayed its log since a restart):
// nothing is known, nothing was changed.
var ErrCustodyUnknown = errors.New("no cluster record yet")

func (p *Plane) followCustody(ctx context.Context) (bool, error) {
	c, ok := p.raft.FSM().Cluster()
	if !ok {
		return false, ErrCustodyUnknown
	}
	if p.cfg.CADir == "" {
		return false, nil
	}
	if c.CAHolder == p.cfg.NodeID {
		return p.holdCustody(c)
	}
	if p.ca.Load() == nil && !p.caDirExists() {
		return false, nil
	}
	// Judge the copy by the current record, not one this node has not
	// caught up with yet.
	if err := p.SyncRead(ctx); err != nil {
		return false, err
	}
	if c, _ = p.raft.FSM().Cluster(); c.CAHolder == p.cfg.NodeID {
		// This node's FSM had not caught up (a restart replaying its log):
		// the record names it.
		return p.holdCustody(c)
	}
	if m := pki.ReadCAMarker(p.cfg.CADir); m != "" && m == c.CAHolder {
		return false, nil // keys of a move not (yet) recorded: kept, never used
	}
	if err := p.probeHolder(ctx, c); err != nil {
		return false, fmt.Errorf("keeping this node's CA copy: %w", err)
	}
	p.setCA(nil)
	if err := pki.RemoveCADir(p.cfg.CADir); err != nil {
		return false, codes.Wrap(codes.StateDir, err)
	}
	p.log.Info("CA copy released: the holder on record proved it holds the keys", "code", codes.EventCAHandedOff,
		"holder", p.nameOf(c.CAHolder))
	return false, nil
}

// holdCustody is followCustody on the node the record c names: load the
// keys if they are not loaded, clear the copy's marker.
func (p *Plane) holdCustody(c state.Cluster) (bool, error) {
	if p.ca.Load() == nil && p.caDirExists() {
		cur, next, err := pki.LoadCAKeys(p.cfg.CADir) // ca/ and, during a rotation, ca/next/
		if err != nil {
			return false, codes.Wrap(codes.StateCorrupt, fmt.Errorf("%s: %w", p.cfg.CADir, err))
		}
		if cur.Fingerprint().String() != c.CAFingerprint && (next == nil || next.Fingerprint().String() != c.CAFingerprint) {
			return false, codes.Wrap(codes.StateCorrupt, fmt.Errorf("%s holds another CA than the cluster's", p.cfg.CADir))
		}
		p.setCAs(cur, next)
		p.log.Info("CA keys loaded: the record names this node the CA holder")
	}
	p.settleKeys(c)
	if p.caDirExists() {
		if err := pki.ClearCAMarker(p.cfg.CADir); err != nil {
			p.log.Warn("CA copy marker not cleared", "err", err)
		}
	}
	return p.ca.Load() != nil, nil
}

// probeHolder has the holder on record sign a fresh nonce and verifies it
// against the CA certificates raft records.
func (p *Plane) probeHolder(ctx context.Context, c state.Cluster) error {
	n, ok := p.raft.FSM().Node(c.CAHolder)
	if !ok || n.EnrollAddr == "" {
		return codes.Wrap(codes.CAHolderDown, fmt.Errorf("CA holder %s has no control address on record", c.CAHolder))
	}
	nonce, err := newNonce()
	if err != nil {
		return err
	}
	var a CAProbeAnswer
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.client.Call(cctx, n.EnrollAddr, PathCAProbe, true, CAProbeRequest{Nonce: nonce}, &a); err != nil {
		return codes.Wrap(codes.CAProbeFailed, fmt.Errorf("probe %s: %w", n.Name, err))
	}
	if err := verifyProbes(c, nonce, a); err != nil {
		return codes.Wrap(codes.CAProbeFailed, fmt.Errorf("%s: %w", n.Name, err))
	}
	return nil
}

func newNonce() ([]byte, error) {
	n := make([]byte, 32)
	if _, err := rand.Read(n); err != nil {
		return nil, fmt.Errorf("nonce: %w", err)
	}
	return n, nil
}

// handleCAProbe: the CA holder signs a nonce, proving it holds working
// keys (the old holder asks before it releases its copy).
func (p *Plane) handleCAProbe(w http.ResponseWriter, r *http.Request, _ Caller) {
	var req CAProbeRequest
	if err := apitype.DecodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := p.SyncRead(r.Context()); err != nil {
		writeError(w, err)
		return
	}
	if p.heldCA() == nil {
		writeError(w, codes.Wrap(codes.NotCAHolder, fmt.Errorf("%s does not hold the CA", p.cfg.Name)))
		return
	}
	c, _ := p.raft.FSM().Cluster()
	cur, next, err := p.keysOnRecord(c)
	if err != nil {
		writeError(w, err)
		return
	}
	a, err := signProbes(cur, next, req.Nonce)
	if err != nil {
		writeError(w, err)
		return
	}
	apitype.WriteJSON(w, http.StatusOK, a)
}
