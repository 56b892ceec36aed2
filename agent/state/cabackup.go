package state

import (
	"errors"
	"fmt"
	"time"

	"github.com/meshd/meshd/codes"
)

// RecordCABackup records that a sealed CA backup was taken (when, on
// which node): no secret, only the time `meshctl status` shows.
type RecordCABackup struct {
	NodeID string    `json:"node_id"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor,omitempty"`
}

func (RecordCABackup) commandType() cmdType { return typeRecordCABackup }

func (c RecordCABackup) applyTo(s *Snapshot) error {
	if s.Cluster == nil {
		return codes.Wrap(codes.NotInCluster, errors.New("record CA backup: no cluster yet"))
	}
	if c.NodeID != s.Cluster.CAHolder {
		return codes.Wrap(codes.NotCAHolder, fmt.Errorf("node %s does not hold the CA", c.NodeID))
	}
	s.Cluster.CABackedUp = c.At
	s.audit(AuditEvent{Code: codes.EventCABackedUp, At: c.At, Actor: c.Actor, Subject: s.nodeName(c.NodeID),
		Detail: "sealed CA backup taken"})
	return nil
}

func (s *Snapshot) nodeName(id string) string {
	if n, ok := s.Nodes[id]; ok {
		return n.Name
	}
	return id
}
