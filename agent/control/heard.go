package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// PathHeard is the question the raft leader's liveness verdict
// (verdict.go) asks every other control node: when did your lighthouse
// last take a host update from each of these overlay addresses. Control
// nodes only (controlOnly), as the other control-to-control routes.
const PathHeard = "/v1/lighthouse/heard"

// maxHeardAsked caps one question: the leader asks about the members
// silent on it, which its silence loop caps at 1,024, and those on record
// unheard, re-checked in batches of the same size.
const maxHeardAsked = 4096

// Lighthouse is what a control node's Nebula, as a lighthouse, knows of
// the members' host updates (Nebula patch 9, kept by
// agent/member/silence.go): the verdict's input on the leader, the
// answer to PathHeard on the others.
type Lighthouse interface {
	// Silent is the members unheard here for three intervals (After), as
	// the silence loop last found them: its cost is theirs.
	Silent() []netip.Addr
	// Heard is how long ago addr's last host update reached this
	// lighthouse; false if it never did since Listening.
	Heard(addr netip.Addr) (time.Duration, bool)
	// Listening is how long this lighthouse has taken host updates (its
	// Nebula's age): a member it never heard is silent only once this
	// passes After.
	Listening() time.Duration
	// After is three lighthouse intervals: unheard this long is silent.
	After() time.Duration
}

// HeardRequest asks when the answering lighthouse last heard each address.
type HeardRequest struct {
	Addrs []string `json:"addrs"`
}

// HeardAnswer is one lighthouse's answer, in ages (not times: no clock is
// compared across nodes): AgesMs[i] is how many milliseconds ago
// Addrs[i]'s last host update reached it, -1 if none did since it
// started listening ListeningMs ago.
type HeardAnswer struct {
	AgesMs      []int64 `json:"ages_ms"`
	ListeningMs int64   `json:"listening_ms"`
	AfterMs     int64   `json:"after_ms"`
}

// heardAnswer is lh's answer about addrs.
func heardAnswer(lh Lighthouse, addrs []netip.Addr) HeardAnswer {
	out := HeardAnswer{AgesMs: make([]int64, len(addrs)), ListeningMs: lh.Listening().Milliseconds(), AfterMs: lh.After().Milliseconds()}
	for i, a := range addrs {
		out.AgesMs[i] = -1
		if age, ok := lh.Heard(a); ok {
			out.AgesMs[i] = age.Milliseconds()
		}
	}
	return out
}

// vote is what one answer says of an address: heard within three
// intervals, silent for them, or nothing (never heard by a lighthouse
// listening for less than that: too young to say).
type vote int

const (
	voteNone vote = iota
	voteHeard
	voteSilent
)

// voteOf reads answer a's i-th age.
func (a HeardAnswer) voteOf(i int) vote {
	after := a.AfterMs
	switch age := a.AgesMs[i]; {
	case age >= 0 && age < after:
		return voteHeard
	case age >= after, a.ListeningMs >= after:
		return voteSilent
	}
	return voteNone
}

// handleHeard answers PathHeard from this node's lighthouse.
func (p *Plane) handleHeard(w http.ResponseWriter, r *http.Request, _ Caller) {
	lhp := p.lighthouse.Load()
	if lhp == nil {
		writeError(w, codes.Wrap(codes.BadRequest, errors.New("this control node keeps no record of host updates")))
		return
	}
	var req HeardRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64*maxHeardAsked)).Decode(&req); err != nil {
		writeError(w, codes.Wrap(codes.BadRequest, fmt.Errorf("heard request: %w", err)))
		return
	}
	if len(req.Addrs) > maxHeardAsked {
		writeError(w, codes.Wrap(codes.BadRequest, fmt.Errorf("heard request: %d addresses, at most %d", len(req.Addrs), maxHeardAsked)))
		return
	}
	addrs := make([]netip.Addr, len(req.Addrs))
	for i, s := range req.Addrs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			writeError(w, codes.Wrap(codes.BadRequest, fmt.Errorf("heard request: %w", err)))
			return
		}
		addrs[i] = a
	}
	apitype.WriteJSON(w, http.StatusOK, heardAnswer(*lhp, addrs))
}

// askHeard asks the control node at addr about addrs (control.Client:
// this node's own leaf, which the guard checks is a control node's).
func (p *Plane) askHeard(ctx context.Context, enrollAddr string, addrs []netip.Addr) (HeardAnswer, error) {
	req := HeardRequest{Addrs: make([]string, len(addrs))}
	for i, a := range addrs {
		req.Addrs[i] = a.String()
	}
	var out HeardAnswer
	if err := p.client.Call(ctx, enrollAddr, PathHeard, true, req, &out); err != nil {
		return HeardAnswer{}, err
	}
	if len(out.AgesMs) != len(addrs) {
		return HeardAnswer{}, fmt.Errorf("%s answered %d ages for %d addresses", enrollAddr, len(out.AgesMs), len(addrs))
	}
	return out, nil
}
