package state

import (
	"slices"
	"time"
)

// Departure is one transition (issue 52, DESIGN §12): a node that leaves,
// is removed, fails its join or is reaped, and a former record that a new
// admission reuses or an operator forgets, keeps nothing. Every
// certificate the record ever held (TLS and Nebula, current, previous and
// retired) is revoked, so every Nebula blocks it and no door takes its
// leaf; a rotation of the gossip keys it held is owed; the prefixes it
// carried move to a standby. The invariant the FSM keeps, whatever the
// order of commands: every fingerprint of every former record is in
// Revocations (state.TestDepartureInvariant), and a revocation is never
// dropped while a record or the list may still need it.

// depart moves n into the former state to (left, removed or failed) at
// at, with cause (a failed join's) and returns the record as stored. The
// caller has checked that the move is allowed. A record already former
// is revoked again, which adds only what is missing: departure is
// idempotent.
func (s *Snapshot) depart(n Node, to NodeState, cause string, at time.Time, actor string) Node {
	s.revoke(n, at)
	if !n.State.Former() {
		s.oweKeys(n.ID) // it held the gossip keys (a stock Nebula member owes nothing)
	}
	moved := n.State != to
	n.State, n.Prior = to, ""
	if cause != "" {
		n.Cause = cause
	}
	if moved {
		n.Updated = at
	}
	s.Nodes[n.ID] = n
	s.settleNodeCarriers(n.Routes, at, actor) // a departed router carries nothing
	return n
}

// revoke adds every certificate n ever held to the revocations, each
// fingerprint once: one revoked earlier (a removal, then a reuse) is not
// added again. It reports how many it added.
func (s *Snapshot) revoke(n Node, at time.Time) int {
	added := 0
	for _, fp := range everyFingerprint(n) {
		if s.revoked(n.ID, fp) {
			continue
		}
		s.Revocations = append(s.Revocations, Revocation{NodeID: n.ID, Fingerprint: fp, At: at})
		added++
	}
	return added
}

// revoked reports whether the certificate fp of node id is revoked.
func (s *Snapshot) revoked(id, fp string) bool {
	return slices.ContainsFunc(s.Revocations, func(r Revocation) bool { return r.NodeID == id && r.Fingerprint == fp })
}

// everyFingerprint lists every certificate n ever held, each once: the
// current Nebula and TLS ones, the TLS leaf a renewal just replaced, and
// every retired one. A departure revokes them all.
func everyFingerprint(n Node) []string {
	var out []string
	for _, fp := range append([]string{n.NebulaFingerprint, n.TLSFingerprint, n.PrevTLSFingerprint}, n.Retired...) {
		if fp != "" && !slices.Contains(out, fp) {
			out = append(out, fp)
		}
	}
	return out
}

// Unrevoked lists the fingerprints of n that are not revoked: for a
// former record, none (the departure invariant).
func (f *FSM) Unrevoked(n Node) []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []string
	for _, fp := range everyFingerprint(n) {
		if !f.s.revoked(n.ID, fp) {
			out = append(out, fp)
		}
	}
	return out
}
