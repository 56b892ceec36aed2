package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
)

// cmdType is the first byte of an encoded command. Values are part of the
// raft log format: never renumber or reuse one.
type cmdType byte

const (
	typeBootstrap            cmdType = 1
	typeMintToken            cmdType = 2
	typeAdmit                cmdType = 3
	typeSetNodeState         cmdType = 4
	typeRenewNebula          cmdType = 5
	typeTracked              cmdType = 6
	typeRevokeToken          cmdType = 7
	typePruneTokens          cmdType = 8
	typeRenewTLS             cmdType = 9
	typeRecordCerts          cmdType = 10
	typeAbortAdmission       cmdType = 11
	typeSetGossipKeys        cmdType = 12
	typeRecordRevocationAcks cmdType = 13
	typeConfirmJoin          cmdType = 14
	typeFailJoin             cmdType = 15
	// 40-49: the approval of a join (approval.go), numbered apart from
	// the commands other branches of issue 13 add.
	typeRequestApproval cmdType = 40
	typeApproveJoin     cmdType = 41
	typeSetCAHolder     cmdType = 30
	typeRecordCABackup  cmdType = 31
	typeRotateCA        cmdType = 20 // issue 13 item 4; 16-19 left to the other parts of issue 13
	// 50-59: issue 29's node settings, numbered apart from the other
	// branches of issue 29.
	typeSetRelay cmdType = 50
	// 70-79: issue 31's ephemeral nodes (ephemeral.go), numbered apart
	// from the other branches of issue 31 (enrolment keys, JWT joins).
	typeForgetNode cmdType = 70
	// 80-89: issue 33's routes (routes.go).
	typeAdvertiseRoutes cmdType = 80
	typeApproveRoute    cmdType = 81
	typeWithdrawRoute   cmdType = 82
	typeSetCarrier      cmdType = 83
	// 90-99: issue 35's stock Nebula members (nebulamember.go).
	typeRenewNebulaMember cmdType = 90
	// 110-119: issue 52's joins that spend nothing (abortjoin.go).
	typeAbortJoin cmdType = 110
	// 120-129: issue 54's liveness verdict (unheard.go).
	typeSetUnheard cmdType = 120
	// 130-139: issue 54's facts a member reports by the internal API (facts.go).
	typeSetFacts cmdType = 130
)

// Command is a change to the cluster state, applied through raft. The
// concrete types are Bootstrap, MintToken, Admit, SetNodeState,
// RenewNebula, RevokeToken, PruneTokens, RecordCerts, AbortAdmission,
// RenewTLS, RecordRevocationAcks, ConfirmJoin, FailJoin, RequestApproval,
// ApproveJoin, SetCAHolder, RecordCABackup, SetRelay, ForgetNode,
// AdvertiseRoutes, ApproveRoute, WithdrawRoute, SetCarrier, AbortJoin,
// SetUnheard, SetFacts and Tracked.
type Command interface {
	commandType() cmdType
	// applyTo applies the command to s, in the file of its concern: it
	// checks everything first and changes s only once nothing can fail.
	applyTo(s *Snapshot) error
}

// Bootstrap creates the cluster and records the origin node (active, with
// its overlay IP allocated). It fails with codes.AlreadyInitialised when a
// cluster exists.
type Bootstrap struct {
	Cluster Cluster   `json:"cluster"`
	Origin  Node      `json:"origin"`
	At      time.Time `json:"at"`
	Actor   string    `json:"actor,omitempty"`
}

// MintToken records a join token (by the hash of its secret). A hash that
// is already recorded is refused.
type MintToken struct {
	Record enroll.TokenRecord `json:"record"`
	Actor  string             `json:"actor,omitempty"`
	// At is when it was minted, to the nanosecond: the audit event's time
	// (Record.Created is whole seconds, like the token's expiry; an entry
	// written before At existed falls back to it).
	At time.Time `json:"at,omitzero"`
	// Names: the one name rule (names.go) applies to this mint, as it
	// does to every mint written since issue 52.
	Names bool `json:"names,omitempty"`
}

// Admit is the admission compare-and-set, ONE raft entry: it consumes the
// token, records the node as joining with its public keys and allocates
// its overlay IP (the lowest free one unless the admission names one), or
// fails with nothing changed. The record of a former node (left, removed,
// failed) whose id the admission names is reused: same id and overlay IP,
// its old certificates revoked. RecordCerts then records the
// certificates, ConfirmJoin makes the node active.
type Admit struct {
	Admission enroll.Admission `json:"admission"`
	Node      Node             `json:"node"`
	Actor     string           `json:"actor,omitempty"`
	// Names: the one name rule (names.go) applies to this admission, as
	// it does to every admission written since issue 52.
	Names bool `json:"names,omitempty"`
}

// SetNodeState moves a node to another state. Moving a node to "removed"
// revokes its certificates; a removed node stays removed.
type SetNodeState struct {
	NodeID string    `json:"node_id"`
	State  NodeState `json:"state"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor,omitempty"`
	// Keep is, with State left, the token the leaving node's own `join
	// --force` uses (Node.KeptToken); zero otherwise.
	Keep enroll.TokenHash `json:"keep,omitzero"`
}

func (Bootstrap) commandType() cmdType    { return typeBootstrap }
func (MintToken) commandType() cmdType    { return typeMintToken }
func (Admit) commandType() cmdType        { return typeAdmit }
func (SetNodeState) commandType() cmdType { return typeSetNodeState }
func (RenewNebula) commandType() cmdType  { return typeRenewNebula }
func (Tracked) commandType() cmdType      { return typeTracked }

// Encode returns the raft log form of c: its type byte, then JSON.
func Encode(c Command) ([]byte, error) {
	if c == nil {
		return nil, errors.New("encode command: nil")
	}
	body, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode command %T: %w", c, err)
	}
	return append([]byte{byte(c.commandType())}, body...), nil
}

// Decode reads a command written by Encode. An empty entry, an unknown type
// or a malformed body is an error (codes.Internal: the log holds something
// this meshd cannot apply).
func Decode(b []byte) (Command, error) {
	if len(b) == 0 {
		return nil, codes.Wrap(codes.Internal, errors.New("decode command: empty"))
	}
	var (
		c   Command
		err error
	)
	switch cmdType(b[0]) {
	case typeBootstrap:
		c, err = decodeAs[Bootstrap](b[1:])
	case typeMintToken:
		c, err = decodeAs[MintToken](b[1:])
	case typeAdmit:
		c, err = decodeAs[Admit](b[1:])
	case typeSetNodeState:
		c, err = decodeAs[SetNodeState](b[1:])
	case typeRenewNebula:
		c, err = decodeAs[RenewNebula](b[1:])
	case typeTracked:
		c, err = decodeAs[Tracked](b[1:])
	case typeRevokeToken:
		c, err = decodeAs[RevokeToken](b[1:])
	case typePruneTokens:
		c, err = decodeAs[PruneTokens](b[1:])
	case typeRecordCerts:
		c, err = decodeAs[RecordCerts](b[1:])
	case typeAbortAdmission:
		c, err = decodeAs[AbortAdmission](b[1:])
	case typeSetGossipKeys:
		c, err = decodeAs[SetGossipKeys](b[1:])
	case typeRenewTLS:
		c, err = decodeAs[RenewTLS](b[1:])
	case typeRecordRevocationAcks:
		c, err = decodeAs[RecordRevocationAcks](b[1:])
	case typeConfirmJoin:
		c, err = decodeAs[ConfirmJoin](b[1:])
	case typeFailJoin:
		c, err = decodeAs[FailJoin](b[1:])
	case typeRequestApproval:
		c, err = decodeAs[RequestApproval](b[1:])
	case typeApproveJoin:
		c, err = decodeAs[ApproveJoin](b[1:])
	case typeSetCAHolder:
		c, err = decodeAs[SetCAHolder](b[1:])
	case typeRecordCABackup:
		c, err = decodeAs[RecordCABackup](b[1:])
	case typeRotateCA:
		c, err = decodeAs[RotateCA](b[1:])
	case typeSetRelay:
		c, err = decodeAs[SetRelay](b[1:])
	case typeForgetNode:
		c, err = decodeAs[ForgetNode](b[1:])
	case typeAdvertiseRoutes:
		c, err = decodeAs[AdvertiseRoutes](b[1:])
	case typeApproveRoute:
		c, err = decodeAs[ApproveRoute](b[1:])
	case typeWithdrawRoute:
		c, err = decodeAs[WithdrawRoute](b[1:])
	case typeSetCarrier:
		c, err = decodeAs[SetCarrier](b[1:])
	case typeRenewNebulaMember:
		c, err = decodeAs[RenewNebulaMember](b[1:])
	case typeAbortJoin:
		c, err = decodeAs[AbortJoin](b[1:])
	case typeSetUnheard:
		c, err = decodeAs[SetUnheard](b[1:])
	case typeSetFacts:
		c, err = decodeAs[SetFacts](b[1:])
	default:
		return nil, codes.Wrap(codes.Internal, fmt.Errorf("decode command: unknown type %d", b[0]))
	}
	if err != nil {
		return nil, codes.Wrap(codes.Internal, fmt.Errorf("decode command type %d: %w", b[0], err))
	}
	return c, nil
}

func decodeAs[T Command](body []byte) (Command, error) {
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, err
	}
	return v, nil
}
