package control

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/crash"
	"github.com/meshd/meshd/pki"
)

// receiveTimeout bounds the handoff's call to its target (a read index,
// four files written and fsynced, one signature): a target that does not
// answer in time gets CAProbeFailed, and custody stays where it is.
const receiveTimeout = 30 * time.Second

// custodyTarget checks that node id may take custody: an active control
// node that raft's configuration lists as a voter.
func (p *Plane) custodyTarget(n state.Node) error {
	switch {
	case n.Role != "control":
		return codes.Wrap(codes.CustodyTarget, fmt.Errorf("%s is a %s node", n.Name, n.Role))
	case n.State != state.NodeActive:
		return codes.Wrap(codes.CustodyTarget, fmt.Errorf("%s is %s", n.Name, n.State))
	case !p.raft.IsVoter(n.ID):
		return codes.Wrap(codes.CustodyTarget, fmt.Errorf("%s is not a raft voter", n.Name))
	}
	return nil
}

// handleCAReceive is the handoff's target: it takes the CA keys only from
// the holder on record, only as an active control voter, only for the
// cluster's CA; writes them to its CA directory as a whole (marked as
// received from the holder), loads them back from disk, and signs the
// nonce with the loaded keys. It signs nothing else with them until the
// record names it.
func (p *Plane) handleCAReceive(w http.ResponseWriter, r *http.Request, c Caller) {
	var req CAReceive
	if err := apitype.DecodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	pr, err := p.receiveCA(r.Context(), c, req)
	if err != nil {
		p.log.Warn("CA handoff refused", "code", codes.OrInternal(err), "caller", c.Name, "err", err)
		writeError(w, err)
		return
	}
	apitype.WriteJSON(w, http.StatusOK, pr)
}

func (p *Plane) receiveCA(ctx context.Context, c Caller, req CAReceive) (CAProbeAnswer, error) {
	if err := p.SyncRead(ctx); err != nil {
		return CAProbeAnswer{}, err
	}
	cl, ok := p.raft.FSM().Cluster()
	if !ok {
		return CAProbeAnswer{}, codes.Wrap(codes.NotInCluster, errors.New("no cluster record yet"))
	}
	if cl.CAHolder != c.NodeID {
		return CAProbeAnswer{}, codes.Wrap(codes.NotCAHolder, fmt.Errorf("%s sent CA keys but does not hold the CA on record", c.Name))
	}
	self, ok := p.raft.FSM().Node(p.cfg.NodeID)
	if !ok {
		return CAProbeAnswer{}, codes.Wrap(codes.CustodyTarget, errors.New("this node has no record"))
	}
	if err := p.custodyTarget(self); err != nil {
		return CAProbeAnswer{}, err
	}
	ca, err := checkClusterCA(cl, req.CA)
	if err != nil {
		return CAProbeAnswer{}, err
	}
	var next *pki.CA
	if cl.Rotation != nil {
		// The rotation moves with custody: without the next CA's keys
		// this node could neither sign in phase reissue nor finish.
		if req.Next == nil {
			return CAProbeAnswer{}, codes.Wrap(codes.BadRequest, fmt.Errorf("a CA rotation is in progress and %s sent no keys of its next CA", c.Name))
		}
		if next, err = checkNextCA(cl, *req.Next); err != nil {
			return CAProbeAnswer{}, err
		}
	}
	p.custody.Lock()
	defer p.custody.Unlock()
	if err := pki.SaveCAKeys(p.cfg.CADir, ca, next, c.NodeID); err != nil {
		return CAProbeAnswer{}, codes.Wrap(codes.StateDir, err)
	}
	crash.At(crash.CustodyAfterReceive)
	loaded, loadedNext, err := pki.LoadCAKeys(p.cfg.CADir)
	if err == nil && (loaded.Fingerprint() != ca.Fingerprint() || (next != nil) != (loadedNext != nil)) {
		err = errors.New("the keys read back are not those written")
	}
	if err != nil {
		return CAProbeAnswer{}, codes.Wrap(codes.StateDir, fmt.Errorf("the CA keys just written do not load: %w", err))
	}
	p.setCAs(loaded, loadedNext)
	p.log.Info("CA keys received; this node signs with them once the record names it", "from", c.Name, "next_ca", loadedNext != nil)
	return signProbes(loaded, loadedNext, req.Nonce)
}

// checkClusterCA parses b and checks it is the cluster's CA (both
// certificates as raft records them).
func checkClusterCA(cl state.Cluster, b pki.CABundle) (*pki.CA, error) {
	ca, err := pki.ParseCA(b)
	if err != nil {
		return nil, codes.Wrap(codes.BadRequest, err)
	}
	nfp, _ := ca.NebulaFingerprint()
	want, _, err := pki.NebulaCertInfo(cl.NebulaCACert)
	if ca.Fingerprint().String() != cl.CAFingerprint || err != nil || nfp != want {
		return nil, codes.Wrap(codes.CAOtherCluster, errors.New("the CA keys are not this cluster's CA"))
	}
	return ca, nil
}

// Handoff moves CA custody from this node to the control node called
// name (`meshctl ca handoff NAME`): it sends the keys over mTLS, verifies
// the target's probe, records the move (SetCAHolder), then releases its
// own copy. Run again after a failure at any step, it finishes the move.
func (p *Plane) Handoff(ctx context.Context, name, actor string) (Handoff, error) {
	start := time.Now()
	if err := p.SyncRead(ctx); err != nil {
		return Handoff{}, err
	}
	c, ok := p.raft.FSM().Cluster()
	if !ok {
		return Handoff{}, codes.Wrap(codes.NotInCluster, errors.New("no cluster record yet"))
	}
	t, ok := p.raft.FSM().NodeByName(name)
	if !ok {
		return Handoff{}, codes.Wrap(codes.NodeUnknown, fmt.Errorf("no node named %q", name))
	}
	out := Handoff{From: p.cfg.Name, To: t.Name}
	if c.CAHolder == t.ID && t.ID != p.cfg.NodeID {
		// Recorded already (a re-run after a crash past the record):
		// finish by releasing this node's copy.
		out.Already = true
		had := p.ca.Load() != nil || p.caDirExists()
		if _, err := p.FollowCustody(ctx); err != nil {
			out.ReleaseErr = err
		} else {
			out.Released = had
		}
		out.Took = time.Since(start)
		return out, nil
	}
	if c.CAHolder != p.cfg.NodeID {
		return Handoff{}, codes.Wrap(codes.NotCAHolder, fmt.Errorf("%s holds the CA, not %s; run this there", p.nameOf(c.CAHolder), p.cfg.Name))
	}
	if t.ID == p.cfg.NodeID {
		return Handoff{}, codes.Wrap(codes.CustodyTarget, fmt.Errorf("%s already holds the CA", t.Name))
	}
	if err := p.custodyTarget(t); err != nil {
		return Handoff{}, err
	}
	if p.heldCA() == nil {
		return Handoff{}, codes.Wrap(codes.StateCorrupt, fmt.Errorf("the record names %s the CA holder but its CA keys are not loaded", p.cfg.Name))
	}
	p.custody.Lock()
	defer p.custody.Unlock()
	// Under the custody lock no rotation begins or finishes on this node
	// (RotateCA, FinishCARotation take it too): the keys sent are those
	// of the record read now, and SetCAHolder's compare-and-set on the CA
	// fingerprint refuses the move if the record changed anyway.
	c, _ = p.raft.FSM().Cluster()
	if c.CAHolder != p.cfg.NodeID {
		return Handoff{}, codes.Wrap(codes.CAHolderChanged, fmt.Errorf("custody moved to %s meanwhile", p.nameOf(c.CAHolder)))
	}
	cur, next, err := p.keysOnRecord(c)
	if err != nil {
		return Handoff{}, err
	}
	bundle, err := cur.Bundle()
	if err != nil {
		return Handoff{}, err
	}
	req := CAReceive{CA: bundle}
	if next != nil {
		nb, err := next.Bundle()
		if err != nil {
			return Handoff{}, err
		}
		req.Next = &nb
	}
	nonce, err := newNonce()
	if err != nil {
		return Handoff{}, err
	}
	var a CAProbeAnswer
	req.Nonce = nonce
	cctx, cancel := context.WithTimeout(ctx, receiveTimeout)
	defer cancel()
	if err := p.client.Call(cctx, t.EnrollAddr, PathCAReceive, true, req, &a); err != nil {
		if errors.Is(err, ErrUnreachable) || codes.Of(err) == "" {
			err = codes.Wrap(codes.CAProbeFailed, err) // no answer: the keys may or may not be there
		}
		return Handoff{}, fmt.Errorf("send the CA keys to %s: %w", t.Name, err)
	}
	if err := verifyProbes(c, nonce, a); err != nil {
		return Handoff{}, codes.Wrap(codes.CAProbeFailed, fmt.Errorf("%s: %w", t.Name, err))
	}
	crash.At(crash.HandoffAfterProbe)
	if err := p.Write(ctx, &state.SetCAHolder{From: p.cfg.NodeID, To: t.ID, CAFingerprint: c.CAFingerprint,
		At: p.now(), Actor: actor}); err != nil {
		return Handoff{}, err
	}
	p.log.Info("CA custody handed off", "code", codes.EventCAHandedOff, "to", t.Name)
	crash.At(crash.HandoffAfterRecord)
	// A holder that is not the leader had the write forwarded: its FSM
	// catches up by the read index before it judges its copy (else it
	// would still see itself the holder, keep the copy and report it
	// released).
	err = p.SyncRead(ctx)
	if err == nil {
		_, err = p.followCustody(ctx)
	}
	if err == nil && p.ca.Load() != nil {
		err = codes.Wrap(codes.Internal, errors.New("this node's copy is still loaded"))
	}
	if err != nil {
		out.ReleaseErr = err
		p.log.Warn("CA custody moved, this node's copy not yet released; the reconcile loop tries again",
			"code", codes.OrInternal(err), "err", err)
	} else {
		out.Released = true
	}
	out.Took = time.Since(start)
	return out, nil
}
