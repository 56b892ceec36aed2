package state

import (
	"errors"
	"fmt"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// SetCAHolder moves CA custody: the cluster record's CAHolder becomes To.
// It is a compare-and-set on the holder the move was prepared against
// (From), and on the CA (CAFingerprint), so two moves cannot interleave
// and a move prepared for another CA changes nothing. To must be an
// active control node other than From (that it is a raft voter, which the
// FSM does not know, the control plane checks before it writes). Restore
// says the keys came from a sealed backup (`meshctl ca restore`), not from
// the holder (`meshctl ca handoff`); only the audit event differs.
type SetCAHolder struct {
	From          string    `json:"from"`
	To            string    `json:"to"`
	CAFingerprint string    `json:"ca_fingerprint"`
	Restore       bool      `json:"restore,omitempty"`
	At            time.Time `json:"at"`
	Actor         string    `json:"actor,omitempty"`
}

func (SetCAHolder) commandType() cmdType { return typeSetCAHolder }

func (c SetCAHolder) applyTo(s *Snapshot) error {
	if s.Cluster == nil {
		return codes.Wrap(codes.NotInCluster, errors.New("set CA holder: no cluster yet"))
	}
	if c.From != s.Cluster.CAHolder {
		return codes.Wrap(codes.CAHolderChanged, fmt.Errorf("the move was prepared against holder %s; the record names %s", c.From, s.Cluster.CAHolder))
	}
	if c.CAFingerprint != s.Cluster.CAFingerprint {
		return codes.Wrap(codes.CAOtherCluster, errors.New("the move names another CA than the cluster's"))
	}
	to, ok := s.Nodes[c.To]
	switch {
	case !ok:
		return codes.Wrap(codes.CustodyTarget, fmt.Errorf("no node with id %q", c.To))
	case c.To == c.From:
		return codes.Wrap(codes.CustodyTarget, fmt.Errorf("%s already holds the CA", to.Name))
	case to.Role != pki.RoleControl:
		return codes.Wrap(codes.CustodyTarget, fmt.Errorf("%s is a %s node", to.Name, to.Role))
	case to.State != NodeActive:
		return codes.Wrap(codes.CustodyTarget, fmt.Errorf("%s is %s", to.Name, to.State))
	}
	from := c.From
	if n, ok := s.Nodes[c.From]; ok {
		from = n.Name
	}
	s.Cluster.CAHolder = c.To
	event, how := codes.EventCAHandedOff, "handed off"
	if c.Restore {
		event, how = codes.EventCARestored, "restored from a sealed backup"
	}
	s.audit(AuditEvent{Code: event, At: c.At, Actor: c.Actor, Subject: to.Name,
		Detail: fmt.Sprintf("CA custody %s: %s -> %s (node %s)", how, from, to.Name, to.ID)})
	return nil
}
