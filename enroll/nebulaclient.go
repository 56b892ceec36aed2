package enroll

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/trust"
)

// NebulaBundle asks the cluster tok names for a stock Nebula member's
// certificate (`meshctl nebula-bundle`): the same seeds in the same order,
// the same pinned TLS, the same clock check before the secret is sent,
// and the same rule for moving on as Enroll. The answer must name the
// pinned CA and the token's name.
//
// Zero fields of req are filled in: Protocol, Secret, Name and Expires
// from tok, Clock from d.Now; Renew from tok.Renew when the token is a
// renewal token.
func NebulaBundle(ctx context.Context, tok Token, req NebulaRequest, d ClientDeps) (*NebulaResponse, error) {
	c := newClient(tok, d)
	if tok.CA.IsZero() {
		return nil, codes.Wrap(codes.CAMismatch, errors.New("the token pins no CA"))
	}
	if tok.Role != trust.RoleNebula {
		return nil, codes.Wrap(codes.NotNebulaToken, fmt.Errorf("the token admits %s as a %s node, which runs meshd: join it with `meshctl join`", tok.Name, tok.Role))
	}
	if req.Protocol == 0 {
		req.Protocol = ProtocolVersion
	}
	if req.Secret.IsZero() {
		req.Secret = tok.Secret
	}
	if req.Name == "" {
		req.Name = tok.Name
	}
	if req.Expires.IsZero() {
		req.Expires = tok.Expires
	}
	if req.Clock.IsZero() {
		req.Clock = c.now()
	}
	if req.Renew != tok.Renew {
		if tok.Renew {
			return nil, codes.Wrap(codes.NotNebulaToken, fmt.Errorf("the token renews %s's certificate: pass --renew", tok.Name))
		}
		return nil, codes.Wrap(codes.NotNebulaToken, fmt.Errorf("the token admits %s; a renewal needs a renewal token (`meshctl admit %s --nebula-only --renew`)", tok.Name, tok.Name))
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode bundle request: %w", err)
	}
	var failures, sentTo []string
	for _, seed := range tok.Seeds {
		resp, err := c.tryNebula(ctx, seed, body)
		var unreachable *seedError
		switch {
		case errors.As(err, &unreachable):
			if unreachable.sent {
				sentTo = append(sentTo, seed)
			}
			c.step(fmt.Sprintf("seed %s unreachable: %v", seed, unreachable.err))
			failures = append(failures, fmt.Sprintf("%s: %v", seed, unreachable.err))
			if err := stopped(ctx); err != nil {
				return nil, noAnswer(len(tok.Seeds), failures, sentTo, err)
			}
			continue
		case stepsAside(err):
			c.step(fmt.Sprintf("seed %s cannot serve the request now (%s); trying the next", seed, codes.Of(err)))
			failures = append(failures, fmt.Sprintf("%s: %v", seed, err))
			if codes.Of(err) != codes.ClockSkew {
				sentTo = append(sentTo, seed)
			}
			continue
		case err != nil:
			return nil, err
		}
		if err := c.checkNebula(resp); err != nil {
			return nil, err
		}
		return resp, nil
	}
	return nil, noAnswer(len(tok.Seeds), failures, sentTo, nil)
}

// tryNebula is try for a bundle request: connect, verify, compare clocks,
// then POST body to NebulaPath over the verified connection.
func (c *client) tryNebula(ctx context.Context, seed string, body []byte) (*NebulaResponse, error) {
	s, err := c.open(ctx, seed)
	if err != nil {
		return nil, err
	}
	defer s.close()
	if err := c.judgeClock(ctx, s); err != nil {
		return nil, err
	}
	status, data, err := s.roundTrip(ctx, http.MethodPost, NebulaPath, body, false)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, errorFromBody(seed, status, data)
	}
	var resp NebulaResponse
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, codes.Wrap(codes.EnrollRejected, fmt.Errorf("seed %s: malformed bundle response: %w", seed, err))
	}
	return &resp, nil
}

// checkNebula verifies a bundle answer: its CA bundle holds a pinned CA,
// it names the token's node, and it carries a certificate, a CA and a
// lighthouse. (meshctl links no Nebula, so the certificate itself is
// checked by the device's nebula, `nebula -test`, not here; it came over
// the session the pinned CA authenticated.)
func (c *client) checkNebula(resp *NebulaResponse) error {
	if _, err := c.pinnedBundle(resp.CACert, "bundle"); err != nil {
		return err
	}
	rejected := func(format string, args ...any) error {
		return codes.Wrap(codes.EnrollRejected, fmt.Errorf("bundle response: "+format, args...))
	}
	switch {
	case resp.Name != c.tok.Name:
		return rejected("names %q, the token %q", resp.Name, c.tok.Name)
	case !strings.Contains(string(resp.NebulaCert), "NEBULA CERTIFICATE"):
		return rejected("no Nebula host certificate")
	case !strings.Contains(string(resp.NebulaCACert), "NEBULA CERTIFICATE"):
		return rejected("no Nebula CA certificate")
	case !resp.OverlayIP.IsValid():
		return rejected("no overlay address")
	case len(resp.Lighthouses) == 0:
		return rejected("no lighthouse")
	}
	c.step(fmt.Sprintf("certified %s, overlay IP %s, until %s", resp.Name, resp.OverlayIP, resp.Expires.UTC().Format("2006-01-02T15:04:05Z")))
	return nil
}
