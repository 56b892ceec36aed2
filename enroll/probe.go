package enroll

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/trust"
)

// SeedReport is what a joiner learns of one seed without sending anything
// secret: whether it answers, whether it is pinned to the token's CA, and
// its clock.
type SeedReport struct {
	Seed string
	// Err is nil for a seed that answered and passed trust.VerifyPinned. A
	// seed that could not be reached is codes.SeedsUnreachable; a
	// verification failure keeps its own code (codes.CAMismatch,
	// codes.SeedNotControl).
	Err   error
	Role  trust.Role // the seed leaf's role
	Local netip.Addr // the source address the kernel used to reach it
	// Skew compares the clocks, when HasClock (an older seed does not
	// report its time).
	Skew     Skew
	HasClock bool
	// STUNPort is the UDP port the seed says it answers STUN on; 0 when
	// it does not say (a release without the STUN responder).
	STUNPort int
}

// ProbeSeeds connects to every seed of tok in order, verifies each against
// the CA the token pins and asks its time. Nothing secret is sent; the
// token is not touched. d.Step is told each step.
func ProbeSeeds(ctx context.Context, tok Token, d ClientDeps) []SeedReport {
	c := newClient(tok, d)
	out := make([]SeedReport, 0, len(tok.Seeds))
	for _, seed := range tok.Seeds {
		out = append(out, c.probe(ctx, seed))
	}
	return out
}

// ProbeSeed is ProbeSeeds for one seed of tok.
func ProbeSeed(ctx context.Context, tok Token, seed string, d ClientDeps) SeedReport {
	return newClient(tok, d).probe(ctx, seed)
}

func (c *client) probe(ctx context.Context, seed string) SeedReport {
	r := SeedReport{Seed: seed}
	if c.tok.CA.IsZero() {
		r.Err = codes.Wrap(codes.CAMismatch, errors.New("the join token pins no CA"))
		return r
	}
	s, err := c.open(ctx, seed)
	if err == nil {
		defer s.close()
		r.Role, r.Local = s.role, s.local
		r.Skew, r.STUNPort, r.HasClock, err = c.clock(ctx, s)
	}
	var unreachable *seedError
	if errors.As(err, &unreachable) {
		err = codes.Wrap(codes.SeedsUnreachable, fmt.Errorf("seed %s: %w", seed, unreachable.err))
	}
	r.Err = err
	return r
}

// Check asks seed, over a session verified against the token's CA, whether
// tok would be admitted now. The clocks are compared first, as Enroll does,
// and a skew past d.MaxSkew fails with codes.ClockSkew before the secret is
// sent. The seed consumes and records nothing; a refusal comes back with
// the code a join would get (codes.TokenConsumed, codes.NameTaken, ...).
func Check(ctx context.Context, tok Token, seed string, d ClientDeps) (*CheckResponse, error) {
	c := newClient(tok, d)
	if tok.CA.IsZero() {
		return nil, codes.Wrap(codes.CAMismatch, errors.New("the join token pins no CA"))
	}
	s, err := c.open(ctx, seed)
	if err != nil {
		return nil, unreachableCoded(seed, err)
	}
	defer s.close()
	if err := c.judgeClock(ctx, s); err != nil {
		return nil, unreachableCoded(seed, err)
	}
	name := tok.Name
	if tok.Key {
		name = "" // the cluster names a key's joiner
	}
	body, err := json.Marshal(CheckRequest{Protocol: ProtocolVersion, Secret: tok.Secret, Name: name,
		Clock: c.now(), Expires: tok.Expires})
	if err != nil {
		return nil, fmt.Errorf("encode check request: %w", err)
	}
	status, data, err := s.roundTrip(ctx, http.MethodPost, CheckPath, body, false)
	if err != nil {
		return nil, unreachableCoded(seed, err)
	}
	if status != http.StatusOK {
		return nil, errorFromBody(seed, status, data)
	}
	var resp CheckResponse
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("seed %s: malformed check response: %w", seed, err))
	}
	if resp.Name != name {
		return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("seed %s: checked %q, the token names %q", seed, resp.Name, tok.Name))
	}
	return &resp, nil
}

// unreachableCoded gives a connection failure its code; anything else is
// returned as it is.
func unreachableCoded(seed string, err error) error {
	var unreachable *seedError
	if errors.As(err, &unreachable) {
		return codes.Wrap(codes.SeedsUnreachable, fmt.Errorf("seed %s: %w", seed, unreachable.err))
	}
	return err
}
