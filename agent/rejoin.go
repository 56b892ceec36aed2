package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
)

// departTimeout bounds the question whether a node that joins again with
// --force is still a member of its cluster.
const departTimeout = 5 * time.Second

// departForRejoin is join --force on a node that runs as a member: it
// leaves its cluster first, as `meshctl leave` does (a voter leaves raft
// cleanly, so no dead voter stays in the configuration), or refuses with
// the reason (the CA holder; a leave that would cost raft its quorum;
// a control node that cannot tell whether it is still a member). A node
// its cluster no longer counts as a member (removed, failed) has nothing
// to leave. A worker that cannot reach its cluster goes on (it holds no
// vote); this meshd then joins, and its old record stays as it was.
//
// Leaving cannot be undone, so it comes only after the new token's seeds
// have been checked the way the join will check them (verifySeeds): a
// token for a cluster this machine cannot reach or verify costs it
// nothing, neither its membership nor the token.
func (j joiner) departForRejoin(ctx context.Context, tok enroll.Token, underlay netip.Addr, step func(string, ...any)) error {
	rt, err := j.a.running()
	if err != nil {
		return nil // no runtime: nothing runs that could be left
	}
	if err := j.verifySeeds(ctx, tok, underlay, step); err != nil {
		return err
	}
	if err := rt.RemovedErr(); err != nil {
		step("--force: cluster %s no longer knows %s (%v); nothing to leave", rt.Facts().ClusterName, rt.Facts().Name, err)
		return nil
	}
	actx, cancel := context.WithTimeout(ctx, departTimeout)
	_, err = rt.AskNodes(actx)
	cancel()
	switch {
	case codes.Of(err) == codes.NotMember:
		step("--force: %s is no member of cluster %s any more; nothing to leave", rt.Facts().Name, rt.Facts().ClusterName)
		return nil
	case err != nil && rt.Plane() == nil:
		step("--force: cluster %s could not be asked whether %s is a member (%v); its record stays as it is", rt.Facts().ClusterName, rt.Facts().Name, err)
		return nil
	case err != nil:
		return codes.Wrap(codes.OrInternal(err), fmt.Errorf("join --force: control node %s cannot tell whether it is still in cluster %s, so it cannot leave raft cleanly: %w "+
			"(if that cluster is gone for good, stop meshd, remove its state dir and join again)", rt.Facts().Name, rt.Facts().ClusterName, err))
	}
	// A control node is one of the seeds a token minted while it was
	// active names: its departure would revoke the very token it joins
	// with again, so it asks the cluster to keep that one.
	var keep enroll.TokenHash
	if slices.Contains(tok.SeedIDs, rt.Facts().NodeID) && !tok.Secret.IsZero() {
		keep = tok.Secret.Hash()
	}
	if err := rt.DepartKeeping(ctx, operatorOn(ctx, rt.Facts().Name), keep); err != nil {
		return fmt.Errorf("join --force: %s must leave cluster %s first and cannot: %w", rt.Facts().Name, rt.Facts().ClusterName, err)
	}
	// As `meshctl leave`: stop and wipe, so that nothing of the old
	// membership answers (a control node is one of the token's seeds).
	j.a.stopRuntime()
	j.a.setPhase(phaseUnjoined, nil)
	if err := statedir.Wipe(j.a.cfg.StateDir); err != nil {
		return err
	}
	step("--force: %s left cluster %s (raft, record, gossip) before joining again", rt.Facts().Name, rt.Facts().ClusterName)
	return nil
}

// verifySeeds connects to the token's seeds in order until one is
// reachable, verified against the CA the token pins, and within the clock
// bound (enroll.ProbeSeeds: nothing secret is sent). None: the first
// seed's error, with its code, and this node stays where it is.
func (j joiner) verifySeeds(ctx context.Context, tok enroll.Token, underlay netip.Addr, step func(string, ...any)) error {
	pctx, cancel := context.WithTimeout(ctx, departTimeout)
	defer cancel()
	var first error
	for _, r := range enroll.ProbeSeeds(pctx, tok, j.a.preflight().EnrollDeps(underlay, nil, nil)) {
		if r.Err == nil {
			step("--force: seed %s verified against the token's CA before leaving", r.Seed)
			return nil
		}
		if first == nil {
			first = r.Err
		}
	}
	if first == nil {
		first = codes.Wrap(codes.SeedsUnreachable, errors.New("the token names no seed"))
	}
	return fmt.Errorf("join --force: no seed of the token could be verified, so this node stays in its cluster and the token stays unused: %w", first)
}
