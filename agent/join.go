package agent

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/member"
	"github.com/meshd/meshd/agent/preflight"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/crash"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// joiner is the join flow (join.go, plan.go, rejoin.go): DESIGN §6's
// steps over the agent whose single init/join/leave slot, runtime and
// phase it changes.
type joiner struct{ a *Agent }

// Join runs DESIGN §6's join on this machine. Everything reversible comes
// first (token checks, address choice, the host checks a plan makes, key
// generation, the pinned enroll call); the state dir is written only
// after the cluster has recorded this node, and node.json last. A failure
// after the cluster admitted the node and before it confirmed asks the
// cluster to undo the admission (joinabort.go). emit receives each step
// as it happens.
func (j joiner) Join(ctx context.Context, req apitype.JoinRequest, emit func(apitype.JoinLine)) (*apitype.JoinResult, error) {
	done, err := j.a.beginOp()
	if err != nil {
		return nil, err
	}
	defer done()
	step := func(format string, args ...any) { emit(apitype.JoinLine{Step: fmt.Sprintf(format, args...)}) }
	if err := j.a.serving(); err != nil {
		return nil, err
	}

	// 1. decode and check the token locally (or build the one a join by
	// identity joins with).
	tok, err := joinToken(req, j.a.d.Now())
	if err != nil {
		return nil, err
	}
	now := j.a.d.Now()
	if err := j.a.preflight().CheckTokenExpiry(ctx, tok, now); err != nil {
		return nil, err
	}
	step("%s", checkedStep(tok, now))
	crash.At(crash.JoinAfterToken)

	// 2. refuse to overwrite an identity without --force.
	existing, err := statedir.Load(j.a.cfg.StateDir)
	if err != nil && !req.Force {
		return nil, err
	}
	if existing != nil && !req.Force {
		// The same join, interrupted after node.json was written and
		// before the cluster recorded it active: finish it.
		if token, ok := statedir.UnconfirmedJoin(j.a.cfg.StateDir); ok && token == tok.PendingID() {
			if rt, err := j.a.running(); err == nil {
				step("this join was interrupted before it was confirmed; %s runs, finishing its confirmation", existing)
				if err := j.finishJoin(ctx, rt, step); err != nil {
					a, aerr := j.admittedOf(tok, rt.Facts())
					if aerr != nil {
						return nil, err
					}
					return nil, j.undoUnconfirmed(ctx, a, rt.Facts().Underlay, err, step)
				}
				return joinResult(rt.Facts()), nil
			}
		}
		return nil, codes.Wrap(codes.AlreadyJoined, fmt.Errorf("this node is %s", existing))
	}
	if err := statedir.RefuseCAWipe(j.a.cfg.StateDir, "join"); err != nil {
		return nil, err
	}
	crash.At(crash.JoinAfterIdentityCheck)

	// 3. the underlay address (joinclock.go).
	u, err := j.a.preflight().Underlay(ctx, j.a.preflight().UnderlayPin(req.AdvertiseAddr, req.AdvertiseIface), tok)
	if err != nil {
		return nil, err
	}
	underlay := u.Addr
	step("underlay address %s: %s", underlay, u.Why)
	crash.At(crash.JoinAfterUnderlay)

	// The host checks a plan makes (preflight.CheckHost): the ports this
	// role listens on free, the TUN device creatable, the state dir
	// writable with room. Failing, the join stops here, its token unsent.
	_, rtErr := j.a.running() // a member runs: join --force stops it first, freeing what it holds
	found, err := j.a.preflight().CheckHost(tok.Role, existing != nil && rtErr == nil)
	if err != nil {
		return nil, fmt.Errorf("%w; nothing was sent: the token is unused", err)
	}
	step("this machine can run the node: %s", strings.Join(found, "; "))

	// The path check (preflight/netcheck.go): with outbound UDP blocked
	// the overlay cannot come up, so the join stops here, its token
	// unspent, rather than at step 10's confirmation timeout.
	nat, err := j.netcheck(ctx, tok, underlay, step)
	if err != nil {
		return nil, err
	}

	// 4. keys, generated here; only public keys leave this machine. An
	// earlier attempt at this very join whose outcome is unknown left its
	// keys: reuse them, so the cluster can hand back what it recorded.
	keys, reused, err := statedir.PendingKeys(j.a.cfg.StateDir, tok)
	if err != nil {
		return nil, fmt.Errorf("generate keys: %w", err)
	}
	if reused {
		step("reusing the keys of an earlier attempt at this join (its outcome was unknown)")
	} else {
		step("generated TLS and Nebula keys on this machine")
	}
	crash.At(crash.JoinAfterKeys)

	// A member joining again (--force) leaves its cluster first, cleanly.
	if existing != nil {
		if err := j.departForRejoin(ctx, tok, underlay, step); err != nil {
			return nil, err
		}
	}

	// 5-8. pinned TLS to a seed, the clocks compared before the secret
	// goes out, enroll, receive certificates and facts.
	resp, err := enroll.Enroll(ctx, tok, enroll.Request{
		Protocol: enroll.ProtocolVersion, Secret: tok.Secret, Name: requestName(tok), HostName: hostName(tok),
		CSR: keys.CSR, NebulaPublic: keys.NebulaPublicPEM, Underlay: underlay.String(),
		Version: j.a.d.Version, Clock: j.a.d.Now(), Ports: j.ports(), Relay: j.a.cfg.Relay, Ephemeral: req.Ephemeral,
	}, j.joinEnrollDeps(underlay, step, emit))
	if err != nil {
		if !statedir.OutcomeUnknown(err) {
			statedir.SettlePending(j.a.cfg.StateDir) // an answer: nothing recorded for these keys
		}
		return nil, err
	}
	crash.At(crash.JoinAfterEnroll)

	// 9. persist atomically, node.json last; start what this role runs.
	// From here until the confirmation a failure asks the cluster to undo
	// the admission (joinabort.go): the token can be used again.
	adm := admittedBy(tok, keys, resp)
	rt, err := j.commitJoin(ctx, adm.id, resp, underlay.String(), nat)
	if err != nil {
		return nil, j.undoJoin(ctx, adm, underlay, err, step)
	}
	j.a.setPhase(phaseRunning, rt)
	step("identity saved; meshd runs as %s %s", resp.Role, resp.Name)
	crash.At(crash.JoinAfterStart)

	// 10. confirm, not merely configure (finishJoin).
	if err := j.finishJoin(ctx, rt, step); err != nil {
		return nil, j.undoUnconfirmed(ctx, adm, underlay, err, step)
	}
	return joinResult(rt.Facts()), nil
}

// netcheck runs a join's path check against the token's seeds and
// reports its lines as steps. Blocked UDP (proven by a seed the join
// could use that serves STUN) is codes.OverlayUDPBlocked; anything else
// goes on (seeds that answer nothing are the enroll step's
// to report, with its own code). It returns the NAT it found, which the
// runtime starts with (member.Options.NAT).
func (j joiner) netcheck(ctx context.Context, tok enroll.Token, underlay netip.Addr, step func(string, ...any)) (member.NAT, error) {
	rep, err := j.a.preflight().Netcheck(ctx, tok, underlay)
	if err != nil {
		step("path check not run: %v", err)
		return "", nil
	}
	if rep == nil {
		return "", nil // no seed resolves: the enroll step reports it
	}
	for _, c := range preflight.PlanLines(rep) {
		step("%s %s %s: %s", c.Name, c.Status, c.Code, c.Detail)
	}
	// Blocked is judged only by seeds the join could use that serve STUN
	// (preflight.SeedProbe): a cluster of an older release, whose seeds
	// serve none, is "not checked" and the join goes on.
	if err := rep.Err(); codes.Of(err) == codes.OverlayUDPBlocked {
		return "", err
	}
	return member.NATOf(rep), nil
}

func joinResult(f *statedir.Facts) *apitype.JoinResult {
	return &apitype.JoinResult{Cluster: f.ClusterName, ClusterID: f.ClusterID, Node: f.Name,
		NodeID: f.NodeID, Role: string(f.Role), OverlayIP: f.Overlay.Addr().String()}
}

// finishJoin is step 10 of a join: a control node is caught up in raft
// and promoted, every node is alive in gossip and has reached a
// lighthouse over the overlay, and then the cluster records it active.
// Only then are the pending keys settled: until that moment a crash
// leaves node.json next to pending-join.json, and the restarted meshd
// (resumeJoin) or the same `meshctl join` run again finishes the
// confirmation instead of running a member the cluster fails after
// JoinBound. Each part is idempotent (a voter is not added again; a
// second ConfirmJoin is a no-op), so a resumed finish may repeat one.
func (j joiner) finishJoin(ctx context.Context, rt *member.Runtime, step func(string, ...any)) error {
	j.a.finishing.Lock()
	defer j.a.finishing.Unlock()
	if _, ok := statedir.UnconfirmedJoin(j.a.cfg.StateDir); !ok {
		step("confirmed: the cluster records %s active", rt.Facts().Name)
		return nil // finished meanwhile
	}
	cctx, cancel := context.WithTimeout(ctx, joinConfirmTimeout)
	defer cancel()
	if rt.Plane() != nil && !rt.Plane().Raft().IsVoter(rt.Facts().NodeID) {
		if err := rt.Plane().JoinRaft(cctx, rt.Facts().Seeds, step); err != nil {
			return codes.Wrap(codes.JoinUnconfirmed, fmt.Errorf("joined and recorded, but not a raft voter: %w", err))
		}
		crash.At(crash.JoinAfterRaftJoin)
	}
	if err := rt.ConfirmJoin(cctx, step); err != nil {
		return codes.Wrap(codes.JoinUnconfirmed, fmt.Errorf("joined and recorded, but not confirmed: %w", err))
	}
	crash.At(crash.JoinAfterConfirm)
	if err := rt.ConfirmJoined(cctx, step); err != nil {
		return codes.Wrap(codes.JoinUnconfirmed, fmt.Errorf("joined and confirmed here, but the cluster did not record it active: %w", err))
	}
	statedir.SettlePending(j.a.cfg.StateDir) // confirmed: the keys live in the identity
	j.a.log.Info("joined cluster", "cluster", rt.Facts().ClusterName, "node", rt.Facts().Name, "node_id", rt.Facts().NodeID,
		"role", rt.Facts().Role, "overlay_ip", rt.Facts().Overlay)
	return nil
}

// resumeJoin finishes, on a restart, the join a crash interrupted after
// node.json was written (finishJoin); its outcome is logged.
func (j joiner) resumeJoin(ctx context.Context, rt *member.Runtime) {
	j.a.log.Warn("the join that made this node was interrupted before the cluster recorded it active; finishing it", "node", rt.Facts().Name)
	err := j.finishJoin(ctx, rt, func(format string, args ...any) { j.a.log.Info("resumed join: " + fmt.Sprintf(format, args...)) })
	if err != nil {
		j.a.log.Error("the interrupted join could not be finished: run `meshctl join` with its token again, or admit the node again and join --force",
			"code", codes.OrInternal(err), "err", err)
	}
}

// joinConfirmTimeout bounds step 10 of a join.
const joinConfirmTimeout = 30 * time.Second

// ports announces where this node listens.
func (j joiner) ports() enroll.Ports {
	p := j.a.cfg.Ports
	return enroll.Ports{Gossip: p.Gossip, Nebula: p.Nebula, Control: p.Control, Raft: p.Raft}
}

// commitJoin saves the identity (id: what the cluster gave, with this
// machine's keys) and facts and starts the runtime; nat is what the
// join's path check found (empty when it did not run): the runtime's NAT
// until its own first check.
func (j joiner) commitJoin(ctx context.Context, id *pki.Identity, resp *enroll.Response, underlay string,
	nat member.NAT) (_ *member.Runtime, err error) {
	facts := &statedir.Facts{
		NodeID: resp.NodeID, Name: resp.Name, Role: resp.Role, ClusterID: resp.ClusterID,
		ClusterName: resp.ClusterName, Overlay: resp.OverlayIP, Seeds: resp.Seeds,
		SerfPeers: resp.SerfPeers, Lighthouses: resp.Lighthouses, RaftPeers: resp.RaftPeers,
		GossipKeys: resp.GossipKeys, Joined: j.a.d.Now(), MachineID: j.a.machineIDToRecord(), HomeSeed: resp.Seed,
	}
	if err := facts.Underlay.UnmarshalText([]byte(underlay)); err != nil {
		return nil, err
	}
	j.a.stopRuntime()
	j.a.setPhase(phaseUnjoined, nil)
	if err := statedir.Wipe(j.a.cfg.StateDir); err != nil {
		return nil, err
	}
	// A failure from here on (a full disk, a failed fsync or rename) takes
	// back what was written: the state dir is left as an unjoined node's,
	// with the pending keys, so that the same join resumes.
	defer func() {
		if err != nil {
			_ = statedir.Wipe(j.a.cfg.StateDir)
		}
	}()
	if err := id.Save(filepath.Join(j.a.cfg.StateDir, statedir.IdentityDir)); err != nil {
		return nil, statedir.WriteErr(err)
	}
	crash.At(crash.JoinAfterIdentitySaved)
	rt, err := j.a.startRuntime(ctx, facts, runtimeStart{nat: nat})
	if err != nil {
		return nil, err
	}
	if err := statedir.Save(j.a.cfg.StateDir, facts); err != nil {
		rt.Stop()
		return nil, err
	}
	crash.At(crash.JoinAfterNodeFile)
	return rt, nil // the pending keys are settled once the join is confirmed (finishJoin)
}
