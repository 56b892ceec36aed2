package agent

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// A join that fails on this machine after the cluster admitted and
// certified it (step 9 or 10: the overlay does not start, gossip does
// not, a port was taken between the join's host checks and its use, the
// confirmation runs out of time) asks the cluster to undo the admission
// (issue 52 item 10): POST /v1/self/abort with the leaf the join was just
// given, which only this joiner holds. The cluster revokes the
// certificates it signed for the join and gives the token back, so the
// same `meshctl join` can simply be run again once the cause is fixed.
// If this machine cannot reach the cluster to ask, the leader's join
// bound fails the join instead (its token stays used).

// undoTimeout bounds the request to undo an admission (it outlives the
// join's own context: a meshctl that went away still gets its token
// back).
const undoTimeout = 15 * time.Second

// admitted is what the cluster recorded for a join, as far as undoing it
// goes: the node, the control nodes to ask (the one that answered the
// join first) and the identity whose leaf authenticates the request.
type admitted struct {
	name, nodeID string
	seeds        []string
	id           *pki.Identity
	expires      time.Time // the token's
}

// admittedBy is what a join's answer admitted, with this machine's keys.
func admittedBy(tok enroll.Token, keys *pki.Keys, resp *enroll.Response) admitted {
	id := &pki.Identity{CACert: resp.CACert, Cert: resp.TLSCert, Key: keys.TLSKeyPEM,
		NebulaCACert: resp.NebulaCACert, NebulaCert: resp.NebulaCert, NebulaKey: keys.NebulaKeyPEM}
	return admitted{name: resp.Name, nodeID: resp.NodeID, seeds: homeFirst(resp.Seed, resp.Seeds), id: id, expires: tok.Expires}
}

// admittedOf is what the running member of an interrupted join was
// admitted as: its facts and the identity in the state dir.
func (j joiner) admittedOf(tok enroll.Token, f *statedir.Facts) (admitted, error) {
	id, err := pki.LoadIdentity(filepath.Join(j.a.cfg.StateDir, statedir.IdentityDir))
	if err != nil {
		return admitted{}, statedir.Corrupt(err)
	}
	return admitted{name: f.Name, nodeID: f.NodeID, seeds: homeFirst(f.HomeSeed, f.Seeds), id: id, expires: tok.Expires}, nil
}

// homeFirst is seeds with home, when set, first.
func homeFirst(home string, seeds []string) []string {
	out := slices.DeleteFunc(slices.Clone(seeds), func(s string) bool { return s == home })
	if home != "" {
		out = append([]string{home}, out...)
	}
	return out
}

// undoJoin asks the cluster to undo admission a, after the join failed
// here with cause before anything of it runs (commitJoin took back what
// it wrote). Its answer is the join's error: codes.JoinUndone, the token
// usable again (the pending keys are settled: nothing is recorded for
// them any more), or codes.JoinSpent when undoing failed too (the pending
// keys stay, so the same join can still resume before the cluster fails
// it). Either carries cause with its code.
func (j joiner) undoJoin(ctx context.Context, a admitted, underlay netip.Addr, cause error, step func(string, ...any)) error {
	why := fmt.Sprintf("%s %v", codes.OrInternal(cause), cause)
	step("the join failed on this machine after the cluster admitted %s: %s; asking the cluster to undo the admission", a.name, why)
	if err := j.askUndo(ctx, a, underlay, why); err != nil {
		return j.spent(a, why, err)
	}
	statedir.SettlePending(j.a.cfg.StateDir)
	return j.undone(a, why, step)
}

// undoUnconfirmed is undoJoin for a join whose runtime runs but whose
// confirmation failed (cause, from finishJoin). The cluster is asked
// first: undone, the runtime is stopped and the state dir wiped (the
// certificates it ran with are revoked); not undone, it keeps running as
// before, and the same join run again finishes the confirmation. A join
// the cluster confirmed meanwhile is no failure to undo: cause stands.
func (j joiner) undoUnconfirmed(ctx context.Context, a admitted, underlay netip.Addr, cause error, step func(string, ...any)) error {
	why := fmt.Sprintf("%s %v", codes.OrInternal(cause), cause)
	step("the join of %s was not confirmed: %s; asking the cluster to undo the admission", a.name, why)
	err := j.askUndo(ctx, a, underlay, why)
	switch {
	case codes.Of(err) == codes.JoinConfirmed:
		step("the cluster confirmed the join of %s meanwhile: nothing to undo", a.name)
		return cause
	case err != nil:
		return j.spent(a, why, err)
	}
	j.a.stopRuntime()
	j.a.setPhase(phaseUnjoined, nil)
	if err := statedir.Wipe(j.a.cfg.StateDir); err != nil {
		j.a.log.Error("the undone join's identity could not be removed from the state dir", "code", codes.OrInternal(err), "err", err)
	}
	statedir.SettlePending(j.a.cfg.StateDir)
	return j.undone(a, why, step)
}

// askUndo posts the undo to a's control nodes, from the underlay as the
// join's enroll call, presenting a's leaf.
func (j joiner) askUndo(ctx context.Context, a admitted, underlay netip.Addr, why string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	cl, err := control.NewClient(a.id)
	if err != nil {
		return err
	}
	defer cl.CloseIdle()
	cl.Dial(j.a.preflight().EnrollDeps(underlay, nil, nil).Dial)
	return cl.AbortJoin(ctx, a.seeds, why)
}

// undone is the join's error once the cluster undid its admission.
func (j joiner) undone(a admitted, why string, step func(string, ...any)) error {
	step("the cluster undid the admission of %s: the certificates it signed are revoked, the token is unused again", a.name)
	j.a.log.Warn("join failed on this machine and was undone: its token can be used again", "code", codes.JoinUndone,
		"node", a.name, "node_id", a.nodeID, "cause", why)
	return codes.Wrap(codes.JoinUndone, fmt.Errorf("%s; the admission of %s is undone: the token can be used again until %s",
		why, a.name, a.expires.UTC().Format(time.RFC3339)))
}

// spent is the join's error when undoing its admission failed (err).
func (j joiner) spent(a admitted, why string, err error) error {
	j.a.log.Error("join failed on this machine and could not be undone: its token stays used", "code", codes.JoinSpent,
		"node", a.name, "node_id", a.nodeID, "cause", why, "err", err)
	return codes.Wrap(codes.JoinSpent, fmt.Errorf("%s; undoing the admission of %s failed too (%s %v): the cluster marks the join failed "+
		"within its join bound unless the same join, run again, finishes it first", why, a.name, codes.OrInternal(err), err))
}
