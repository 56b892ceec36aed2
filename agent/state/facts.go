package state

import "bytes"

// SetFacts records what a batch of members say of themselves (issue 54
// item 3: the facts control nodes decide by, which reached them only in
// gossip tags before workers leave the gossip pool): the meshd version a
// node runs and its CA report (agent/control.CAReport) with the node's
// signature of it (pki.Attest, kind pki.AttestCA, bound to its node id).
// One raft entry holds every report a control node received in a tick
// (agent/control/facts.go), which checked each signature against the
// node's record before writing; the leader checks them again when the
// batch was forwarded. A node that is not active, or unknown, is skipped,
// not refused: the rest of the batch still applies. An empty field keeps
// what the record holds. The same value again changes nothing. Updated
// does not move: these are reports, not changes of the record's settings.
type SetFacts struct {
	Changes []FactChange `json:"changes"`
	Actor   string       `json:"actor,omitempty"`
}

// FactChange is one node's report in SetFacts. Pool is PoolIn or
// PoolOut (empty: says nothing); Revoked only ever moves the record's
// RevokedApplied forward (a late batch does not take it back).
type FactChange struct {
	NodeID  string `json:"node_id"`
	Version string `json:"version,omitempty"`
	CA      string `json:"ca,omitempty"`
	CASig   []byte `json:"ca_sig,omitempty"`
	NAT     string `json:"nat,omitempty"`
	Pool    string `json:"pool,omitempty"`
	Revoked int    `json:"revoked,omitempty"`
}

// What FactChange.Pool says: the node runs gossip, or it does not.
const (
	PoolIn  = "in"
	PoolOut = "out"
)

func (SetFacts) commandType() cmdType { return typeSetFacts }

func (c SetFacts) applyTo(s *Snapshot) error {
	for _, ch := range c.Changes {
		n, ok := s.Nodes[ch.NodeID]
		if !ok || n.State != NodeActive {
			continue
		}
		if ch.Version != "" {
			n.RunsVersion = ch.Version
		}
		if ch.CA != "" && len(ch.CASig) > 0 {
			n.CAReport, n.CAReportSig = ch.CA, bytes.Clone(ch.CASig)
		}
		if ch.NAT != "" {
			n.NAT = ch.NAT
		}
		switch ch.Pool {
		case PoolIn:
			n.OutOfPool = false
		case PoolOut:
			n.OutOfPool = true
		}
		n.RevokedApplied = max(n.RevokedApplied, ch.Revoked)
		s.Nodes[n.ID] = n
	}
	return nil
}

// Holds reports whether n's record already holds what ch says: a report
// that would change nothing needs no raft entry. The signatures are not
// compared (a signature is randomised: the same report signed again
// differs); both were checked against the record before they were
// written.
func (ch FactChange) Holds(n Node) bool {
	return (ch.Version == "" || ch.Version == n.RunsVersion) && (ch.CA == "" || (ch.CA == n.CAReport && len(n.CAReportSig) > 0)) &&
		(ch.NAT == "" || ch.NAT == n.NAT) && (ch.Pool == "" || (ch.Pool == PoolOut) == n.OutOfPool) && ch.Revoked <= n.RevokedApplied
}
