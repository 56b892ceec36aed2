package enroll

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/meshd/meshd/codes"
)

// Approval of a join (`meshctl admit NAME --approve`, the
// short-authentication-string pattern). A token minted with --approve
// admits nobody until an operator approves the join: once the joiner has
// verified the seed (pinned TLS) and sent the token's secret, both ends
// derive the same 6-digit code from the TLS session (channel binding: the
// session's exported keying material, with the token's hash as context)
// and the joiner shows it. The operator types the code the joiner shows
// into `meshctl approve NAME CODE` on any control node. A code that no
// waiting join shows counts as wrong; ApprovalMaxWrong wrong codes burn
// the token. A thief holding a leaked token gets a pending entry of its
// own, with a code only its own session knows: the operator, reading the
// code off the machine they meant to admit, never types it.
//
// The code belongs to one TLS session: a joiner that reconnects (to this
// seed or the next) gets a new session and shows a new code; the old
// one's pending entry is then never approved.
const (
	// ApprovalMaxWrong wrong codes burn the token.
	ApprovalMaxWrong = 5
	// ApprovalMaxPending is how many sessions may wait on one token at
	// once; a new one pushes out the oldest.
	ApprovalMaxPending = 4
	// ApprovalMaxSessions sessions recorded waiting over a token's life
	// burn it: a join reconnects a few times at most, so more means the
	// token is being played with (and each session costs a raft entry
	// and an audit event).
	ApprovalMaxSessions = 16
	// DefaultApprovalPoll bounds one long poll of a waiting joiner: the
	// seed answers "still pending" (HTTP 202) after it and the joiner asks
	// again over the same connection, well inside port 7300's answer
	// bound.
	DefaultApprovalPoll = 20 * time.Second
	// approvalLabel is the TLS exporter label (RFC 5705/8446) of the code.
	approvalLabel = "EXPORTER-meshd-join-approval-v1"
	// codeDigits is the code's length.
	codeDigits = 6
)

// CodeHash is the SHA-256 of an approval code bound to its token
// (HashCode): what raft records of a waiting join and of an operator's
// attempt. The code itself is never stored or logged on the server side.
type CodeHash [sha256.Size]byte

func (h CodeHash) String() string { return hex.EncodeToString(h[:]) }

// IsZero reports whether h is unset.
func (h CodeHash) IsZero() bool { return h == CodeHash{} }

// MarshalText and UnmarshalText write the hash as hex.
func (h CodeHash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

func (h *CodeHash) UnmarshalText(b []byte) error {
	if len(b) != 2*len(h) {
		return errors.New("approval code hash: want 64 hex characters")
	}
	if _, err := hex.Decode(h[:], b); err != nil {
		return errors.New("approval code hash: want 64 hex characters")
	}
	return nil
}

// SessionCode is the approval code of the TLS session cs for the token
// whose secret hashes to h: 6 decimal digits from the session's exported
// keying material. Both ends of one session derive the same code; another
// session (or another token) gives another.
func SessionCode(cs tls.ConnectionState, h TokenHash) (string, error) {
	ekm, err := cs.ExportKeyingMaterial(approvalLabel, h[:], 32)
	if err != nil {
		return "", fmt.Errorf("TLS keying material for the approval code: %w", err)
	}
	return codeFrom(ekm), nil
}

// codeFrom maps keying material to a 6-digit code (the bias of the modulo
// over 64 bits is negligible).
func codeFrom(ekm []byte) string {
	return fmt.Sprintf("%0*d", codeDigits, binary.BigEndian.Uint64(ekm[:8])%1_000_000)
}

// HashCode binds code to the token h: what raft records.
func HashCode(h TokenHash, code string) CodeHash {
	s := sha256.New()
	s.Write([]byte("meshd approval code v1\x00"))
	s.Write(h[:])
	s.Write([]byte(code))
	return CodeHash(s.Sum(nil))
}

// ParseCode reads a code as an operator types it: 6 digits, spaces and
// dashes ignored ("123 456", "123-456"). Anything else is codes.BadRequest.
func ParseCode(s string) (string, error) {
	c := strings.Map(func(r rune) rune {
		if r == ' ' || r == '-' {
			return -1
		}
		return r
	}, strings.TrimSpace(s))
	if len(c) != codeDigits || strings.Trim(c, "0123456789") != "" {
		return "", codes.Wrap(codes.BadRequest, fmt.Errorf("approval code: want the %d digits the joining machine shows", codeDigits))
	}
	return c, nil
}

// FormatCode groups a code for display: "123 456".
func FormatCode(code string) string {
	if len(code) != codeDigits {
		return code
	}
	return code[:3] + " " + code[3:]
}

// Approval is the approval state of a token minted with --approve, as raft
// records it in the token's record.
type Approval struct {
	// Pending are the sessions that wait for approval, oldest first.
	Pending []PendingJoin `json:"pending,omitempty"`
	// Wrong counts operators' codes that matched no waiting session.
	Wrong int `json:"wrong,omitempty"`
	// Sessions counts the sessions ever recorded waiting.
	Sessions int `json:"sessions,omitempty"`
	// ApprovedAt, ApprovedBy and Approved: the session an operator
	// approved (its code hash), when and by whom.
	ApprovedAt time.Time   `json:"approved_at,omitzero"`
	ApprovedBy string      `json:"approved_by,omitempty"`
	Approved   PendingJoin `json:"approved,omitzero"`
	// BurntAt: ApprovalMaxWrong wrong codes burnt the token (it is revoked
	// too).
	BurntAt time.Time `json:"burnt_at,omitzero"`
}

// PendingJoin is one session waiting for approval: the hash of its code,
// the joiner's source address, the control node it talks to, since when,
// and the joiner's key.
type PendingJoin struct {
	Code   CodeHash  `json:"code"`
	Source string    `json:"source,omitempty"`
	Via    string    `json:"via,omitempty"`
	Since  time.Time `json:"since"`
	// Key is the SHA-256 of the TLS public key the joiner's CSR proves
	// it holds (hex): an approved session's joiner that reconnects with
	// the same key (its pending keys) is the same machine, and goes on.
	Key string `json:"key,omitempty"`
}

// IsApproved reports whether an operator approved a session.
func (a Approval) IsApproved() bool { return !a.ApprovedAt.IsZero() }

// IsBurnt reports whether wrong codes (or too many sessions) burnt the
// token.
func (a Approval) IsBurnt() bool { return !a.BurntAt.IsZero() }

// BurntWhy says why the token was burnt.
func (a Approval) BurntWhy() string {
	if a.Sessions > ApprovalMaxSessions {
		return fmt.Sprintf("more than %d joins waited with it", ApprovalMaxSessions)
	}
	return fmt.Sprintf("%d wrong approval codes", a.Wrong)
}

// Waits reports whether the session with code hash c waits.
func (a Approval) Waits(c CodeHash) bool { return a.waiting(c) }

// waiting reports whether the session with code hash c waits.
func (a Approval) waiting(c CodeHash) bool {
	return slices.ContainsFunc(a.Pending, func(p PendingJoin) bool { return p.Code == c })
}

// WithPending is a with the session p waiting, recorded at at:
// unchanged (ok false) when it waits already or the approval is decided;
// at most ApprovalMaxPending wait, the oldest pushed out; the session
// past ApprovalMaxSessions burns the token instead. a is not modified.
func (a Approval) WithPending(p PendingJoin, at time.Time) (Approval, bool) {
	if a.IsApproved() || a.IsBurnt() || a.waiting(p.Code) {
		return a, false
	}
	out := a
	out.Sessions++
	if out.Sessions > ApprovalMaxSessions {
		out.BurntAt, out.Pending = at, nil
		return out, true
	}
	out.Pending = append(slices.Clone(a.Pending), p)
	out.Pending = out.Pending[max(len(out.Pending)-ApprovalMaxPending, 0):] // the newest ApprovalMaxPending
	return out, true
}

// Attempt is the outcome of an operator's code.
type Attempt int

const (
	// AttemptApproved: the code is a waiting session's; it is approved.
	AttemptApproved Attempt = iota
	// AttemptWrong: no waiting session shows the code.
	AttemptWrong
	// AttemptBurnt: the code was wrong and the last one allowed.
	AttemptBurnt
)

// Try is a after an operator (actor) typed the code whose hash is c at
// at. The caller has checked that a session waits and nothing is decided.
// a is not modified.
func (a Approval) Try(c CodeHash, actor string, at time.Time) (Approval, Attempt) {
	out := a
	out.Pending = slices.Clone(a.Pending)
	if i := slices.IndexFunc(a.Pending, func(p PendingJoin) bool { return p.Code == c }); i >= 0 {
		out.Approved, out.ApprovedAt, out.ApprovedBy = a.Pending[i], at, actor
		out.Pending = nil
		return out, AttemptApproved
	}
	out.Wrong++
	if out.Wrong >= ApprovalMaxWrong {
		out.BurntAt = at
		out.Pending = nil
		return out, AttemptBurnt
	}
	return out, AttemptWrong
}

// Approvals is what the enroll server needs of the ledger to hold a join
// for approval: recording a waiting session in raft, so that an operator
// on any control node can approve it. The ledger's Token shows the
// outcome.
type Approvals interface {
	// RequestApproval records that the session p waits for approval of
	// the join with token h (WithPending), naming this control node as
	// p.Via. A decided approval or a session that waits already is no
	// error.
	RequestApproval(ctx context.Context, h TokenHash, p PendingJoin) error
}

// ApprovalPending is the seed's answer (HTTP 202) to an enroll request
// that waits for an operator's approval: the joiner shows its code and
// sends the same request again over the same connection.
type ApprovalPending struct {
	Name    string    `json:"name"`
	Expires time.Time `json:"expires"` // the token's: no approval by then is codes.ApprovalTimeout
}

// errPending is the enroll server's "still waiting": answered 202.
type errPending struct{ ApprovalPending }

func (errPending) Error() string { return "the join waits for an operator's approval" }
