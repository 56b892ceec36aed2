package control

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// A token names its seeds by node id (enroll.Token.SeedIDs) and the
// joiner sends its secret only to a seed whose leaf is that node. A
// departed control node (left, removed, failed) may have a copy running
// somewhere with a leaf the joiner cannot see revoked; so every unused
// token naming a departed (or unknown) node is revoked
// (RevokeSeedTokens): by the departure itself, by a mint that raced one,
// and by the leader's reconcile pass should either have died half way. A
// usable token then names no departed node (issues 27 and 52). The
// revocations are ordinary RevokeToken entries, which every release
// applies alike.

// seedRevoker is the actor of a revocation a departed seed made.
const seedRevoker = "meshd (seed %s gone)"

// RevokeSeedTokens revokes every token not used or revoked yet that names
// a seed which left, was removed, failed its join or is unknown, in hash order,
// and returns how many it revoked.
func (p *Plane) RevokeSeedTokens(ctx context.Context) (int, error) {
	// The tokens before the records: a token names only seeds on record
	// when it was minted, so records read after it know every one (read
	// the other way round while raft re-applies its log, a token minted
	// after the records read named a seed they did not hold yet).
	toks := p.raft.FSM().Tokens()
	active := map[string]bool{} // may be named: not removed, failed or unknown
	names := map[string]string{}
	kept := map[enroll.TokenHash]bool{} // a control node that left to join again joins with it
	for _, n := range p.raft.FSM().Nodes() {
		active[n.ID] = seedStands(n)
		names[n.ID] = n.Name
		if n.State == state.NodeLeft && n.KeptToken != (enroll.TokenHash{}) {
			kept[n.KeptToken] = true
		}
	}
	slices.SortFunc(toks, func(a, b enroll.TokenRecord) int { return bytes.Compare(a.Hash[:], b.Hash[:]) })
	revoked := 0
	for _, r := range toks {
		if r.Consumed() || r.Revoked() || kept[r.Hash] {
			continue
		}
		i := slices.IndexFunc(r.SeedIDs, func(id string) bool { return !active[id] })
		if i < 0 {
			continue
		}
		gone := names[r.SeedIDs[i]]
		if gone == "" {
			gone = r.SeedIDs[i]
		}
		if err := p.Write(ctx, &state.RevokeToken{Hash: r.Hash, At: p.now(), Actor: fmt.Sprintf(seedRevoker, gone)}); err != nil {
			return revoked, fmt.Errorf("revoke the token for %s naming departed seed %s: %w", r.Name, gone, err)
		}
		p.log.Info("join token revoked: it names a seed that is gone", "token_id", r.Hash.String()[:12], "name", r.Name, "seed", gone)
		revoked++
	}
	return revoked, nil
}

// sweepSeedTokens is RevokeSeedTokens after a departure or a mint, logged
// and not failed: the leader's reconcile pass finishes it.
func (p *Plane) sweepSeedTokens(ctx context.Context) {
	if _, err := p.RevokeSeedTokens(ctx); err != nil {
		p.log.Warn("tokens naming a departed seed not all revoked yet; the leader's next pass does it", "err", err)
	}
}

// SweepSeedTokens is the leader's reconcile duty (RevokeSeedTokens).
func (p *Plane) SweepSeedTokens(ctx context.Context) {
	if p.raft.LeaderReady() { // its FSM holds every entry before its term (raftnode/ready.go)
		p.sweepSeedTokens(ctx)
	}
}

// checkSeedsStayed, after a mint was recorded and applied here
// (WriteApplied), makes sure no seed it names was removed meanwhile: a
// removal applied between the seed list's read and the mint would
// otherwise leave a usable token naming the removed node. Such a token
// is revoked at once, and the mint fails with codes.Busy (mint again). A
// removal applied after the mint revokes it itself (RevokeSeedTokens).
func (p *Plane) checkSeedsStayed(ctx context.Context, rec enroll.TokenRecord) error {
	for _, id := range rec.SeedIDs {
		if n, ok := p.raft.FSM().Node(id); ok && seedStands(n) {
			continue
		}
		p.sweepSeedTokens(ctx)
		return codes.Wrap(codes.Busy, fmt.Errorf("control node %s left or was removed while the token was minted; the token is revoked: mint again", id))
	}
	return nil
}

// seedStands reports whether a token may name n as a seed: a control node
// that has not departed. One that left is gone like one removed (issue
// 52: on main a copy of a control node that left, serving with its
// still-valid leaf, harvested the secret of a control token naming it and
// joined as that node).
func seedStands(n state.Node) bool {
	return n.Role == pki.RoleControl && !n.State.Former()
}

// SeedRevocations answers a joiner's time request (enroll.TimeResponse):
// the revocation list's version and the revoked TLS leaves of the
// control nodes that departed, which the joiner refuses as seeds.
func (l *Ledger) SeedRevocations() (int, []string) {
	revs := l.p.raft.FSM().Revocations()
	departed := map[string]bool{}
	for _, n := range l.p.raft.FSM().Nodes() {
		if n.Role == pki.RoleControl && n.State.Former() {
			departed[n.ID] = true
		}
	}
	var leaves []string
	for _, r := range revs {
		if departed[r.NodeID] {
			leaves = append(leaves, r.Fingerprint)
		}
	}
	return len(revs), leaves
}

var _ enroll.SeedRevocations = (*Ledger)(nil)
