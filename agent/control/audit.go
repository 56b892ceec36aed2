package control

import (
	"context"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
)

// eventNames are the short names `meshctl audit` shows for the events the
// FSM records; an event not listed shows its code.
var eventNames = map[codes.Code]string{
	codes.EventClusterCreated:   "init",
	codes.EventTokenMinted:      "admit",
	codes.EventNodeAdmitted:     "join",
	codes.EventCertsRecorded:    "certs recorded",
	codes.EventNodeActive:       "confirm",
	codes.EventJoinFailed:       "join failed",
	codes.EventNodeLeft:         "leave",
	codes.EventNodeRemoved:      "remove",
	codes.TokenRevoked:          "token revoke",
	codes.EventTokensPruned:     "tokens pruned",
	codes.EventKeysRotated:      "key rotation",
	codes.EventCertRenewed:      "nebula cert renewed",
	codes.EventTLSRenewed:       "tls cert renewed",
	codes.EventAdmissionAborted: "admission aborted",
	codes.EventJoinAborted:      "join undone",
	codes.EventRevocationAcks:   "revocation acks",
	// approval.go
	codes.EventApprovalRequested: "approval wait",
	codes.EventJoinApproved:      "approve",
	codes.EventApprovalWrong:     "approve: wrong code",
	codes.ApprovalBurnt:          "approval: token burnt",
	codes.EventCAHandedOff:       "ca handoff",
	codes.EventCARestored:        "ca restore",
	codes.EventCABackedUp:        "ca backup",
}

// Audit is the cluster's audit trail, oldest first: the FSM's ring
// (state.AuditSize events, in raft, so every control node holds the same
// one and it survives restarts), after a read index so that what the
// leader committed a moment ago is in it. since, if positive, keeps the
// events at or after now-since.
func (p *Plane) Audit(ctx context.Context, since time.Duration) ([]apitype.AuditEvent, error) {
	if err := p.SyncRead(ctx); err != nil {
		return nil, err
	}
	var from time.Time
	if since > 0 {
		from = p.now().Add(-since)
	}
	out := []apitype.AuditEvent{}
	for _, e := range p.raft.FSM().Audit() {
		if e.At.Before(from) {
			continue
		}
		out = append(out, AuditRow(e))
	}
	return out, nil
}

// AuditRow is how the local API shows one audit event.
func AuditRow(e state.AuditEvent) apitype.AuditEvent {
	name, ok := eventNames[e.Code]
	if !ok {
		name = string(e.Code)
	}
	return apitype.AuditEvent{At: e.At, Code: e.Code, Event: name, Actor: e.Actor, Subject: e.Subject, Detail: e.Detail}
}
