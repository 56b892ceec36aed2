package control

import (
	"context"
	"time"

	"github.com/meshd/meshd/enroll"
)

// clusterNow is this node's clock moved to the median of the control
// nodes' clocks (Hooks.Clock): the instant the CA holder signs
// certificates at (a holder whose clock ran 2 h ahead issued leaves not
// valid for 2 h anywhere else), and what a token's expiry is listed
// against, so a control node whose clock runs ahead does not list valid
// tokens as expired. A node whose clock is untrusted mints nothing and
// serves no join. With two control nodes neither can tell whose clock is
// wrong: the median is their midpoint, and both refuse to mint.
func (p *Plane) clusterNow() time.Time {
	dev, _ := p.hooks.Clock()
	return p.now().Add(-dev)
}

// PeerClock asks the control node at addr for its clock (enroll.TimePath,
// over the internal API's mutual TLS) and returns how far it runs ahead of
// now (negative: behind), read at the midpoint of the request so the
// round trip does not count.
func (c *Client) PeerClock(ctx context.Context, addr string, now func() time.Time) (time.Duration, error) {
	var tr enroll.TimeResponse
	sent := now()
	if err := c.Call(ctx, addr, enroll.TimePath, false, nil, &tr); err != nil {
		return 0, err
	}
	received := now()
	return tr.ServerTime.Sub(sent.Add(received.Sub(sent) / 2)), nil
}

// PeerSTUN asks the control node at addr (over the internal API's mutual
// TLS, enroll.TimePath) which UDP port it answers STUN on: 0 when it does
// not say (a release without the STUN responder).
func (c *Client) PeerSTUN(ctx context.Context, addr string) (int, error) {
	var tr enroll.TimeResponse
	if err := c.Call(ctx, addr, enroll.TimePath, false, nil, &tr); err != nil {
		return 0, err
	}
	return tr.STUNPort, nil
}
