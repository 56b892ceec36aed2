package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// ErrUnreachable marks a control node that could not be reached at all (as
// opposed to one that answered with a failure).
var ErrUnreachable = errors.New("control node unreachable")

// forwardedHeader marks a request one control node passed to another; a
// forwarded request is never forwarded again (one hop).
const forwardedHeader = "Meshd-Forwarded"

// Client calls control nodes' internal API over mTLS with this node's
// leaf. One per node, so connections are reused and a new one resumes
// its TLS session (sessions.go): a follower's forwarded write costs a
// request, not a handshake.
type Client struct {
	http     *http.Client
	check    atomic.Pointer[ServerCheck] // see CheckServers
	sessions *sessionCache               // TLS sessions to resume (sessions.go)
}

// maxConnsPerPeer bounds the connections a node opens to one control
// node; more concurrent calls wait for one to be free. Port 7300 closes a
// source's 65th connection (DefaultLimits.ConnsPerSource): a follower
// forwarding a 50-join burst's read indexes, writes and signing requests
// to the leader opened one per concurrent call, reached it, and every
// call past it failed with "connection reset by peer".
const maxConnsPerPeer = 16

// NewClient is a client presenting id's leaf that accepts only servers
// with a control leaf of id's CA.
func NewClient(id *pki.Identity) (*Client, error) {
	l, err := pki.NewLiveIdentity(id)
	if err != nil {
		return nil, err
	}
	return NewLiveClient(l)
}

// NewLiveClient is NewClient presenting l's current leaf at each new
// connection, so a renewed leaf is used without a new client.
func NewLiveClient(l *pki.LiveIdentity) (*Client, error) {
	conf, err := pki.LiveClientTLSConfig(l, pki.RoleControl)
	if err != nil {
		return nil, err
	}
	c := &Client{sessions: newSessionCache(l)}
	conf.VerifyConnection = c.verifyWith(conf.VerifyConnection) // on resumed connections too
	conf.ClientSessionCache = c.sessions                        // sessions.go
	c.http = &http.Client{Transport: &http.Transport{TLSClientConfig: conf,
		MaxConnsPerHost: maxConnsPerPeer, MaxIdleConnsPerHost: maxConnsPerPeer,
		IdleConnTimeout: 90 * time.Second, ForceAttemptHTTP2: false}}
	return c, nil
}

// CloseIdle closes the kept-alive connections.
func (c *Client) CloseIdle() { c.http.CloseIdleConnections() }

// Call POSTs in as JSON (or GETs, with in == nil) to path on the control
// node at addr and decodes the answer into out (unless nil). A transport
// failure wraps ErrUnreachable; an answered failure comes back as the coded
// error it carried (enroll.ErrIPTaken as itself). forwarded marks a
// request passed on by a control node, which the receiver never forwards
// again.
func (c *Client) Call(ctx context.Context, addr, path string, forwarded bool, in, out any) error {
	method, body := http.MethodGet, io.Reader(nil)
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		method, body = http.MethodPost, bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "https://"+addr+path, body)
	if err != nil {
		return err
	}
	if forwarded {
		req.Header.Set(forwardedHeader, "1")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrUnreachable, addr, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrUnreachable, addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		return answered(addr, resp.Status, raw)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}

// answered is the error a control node's failed answer carried.
func answered(addr, status string, raw []byte) error {
	var e ErrorBody
	if json.Unmarshal(raw, &e) != nil || e.ErrCode == "" {
		return fmt.Errorf("%s answered %s", addr, status)
	}
	if e.IPTaken {
		return enroll.ErrIPTaken
	}
	detail := e.Detail
	if detail == "" {
		detail = e.Cause
	}
	return codes.Wrap(e.ErrCode, fmt.Errorf("%s: %s", addr, detail))
}

// Stream GETs path from the control node at addr and hands back the body
// of a 200 answer, for the caller to read until it ends (ctx ends it
// sooner); any other answer is the coded error it carried, a transport
// failure wraps ErrUnreachable. The watch stream (watch.go) is read so.
func (c *Client) Stream(ctx context.Context, addr, path string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnreachable, addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		err := answered(addr, resp.Status, raw)
		if resp.StatusCode == http.StatusNotFound && codes.Of(err) == "" {
			// No route, not a coded answer: a control node of an earlier
			// release.
			return nil, fmt.Errorf("%w: %s: %s", ErrNotServed, addr, path)
		}
		return nil, err
	}
	return resp.Body, nil
}

// ErrNotServed marks a path a control node does not serve at all (its
// release predates it): GET /v1/watch on a control node of an earlier
// release.
var ErrNotServed = errors.New("not served by this control node (an earlier release)")

// Dial opens the client's connections: a test's simulated nodes bind
// their own loopback addresses with it (port 7300 bounds the connections
// of one source address). Set it before the first call.
func (c *Client) Dial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) {
	c.http.Transport.(*http.Transport).DialContext = dial
}

// askPerSeed bounds one control node's answer to a read while others
// are left to ask: a control node that takes a connection but never
// answers (the worker's packets dropped on it, a half-open kept-alive
// connection) costs this much of the caller's budget, not all of it
// (a SYN unanswered is retried by the kernel for two minutes). The last
// seed gets what remains.
const askPerSeed = 3 * time.Second

// AskSeeds GETs path from seeds, in order, until one answers; each but
// the last within askPerSeed. None answering is codes.SeedsUnreachable.
func (c *Client) AskSeeds(ctx context.Context, seeds []string, path string, out any) error {
	var lastErr error = errors.New("no control node known")
	for i, seed := range seeds {
		sctx, cancel := ctx, context.CancelFunc(func() {})
		if i < len(seeds)-1 {
			sctx, cancel = context.WithTimeout(ctx, askPerSeed)
		}
		err := c.Call(sctx, seed, path, false, nil, out)
		cancel()
		if err == nil {
			return nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return codes.Wrap(codes.SeedsUnreachable, fmt.Errorf("no control node answered: %v", lastErr))
}

// PostSeeds POSTs in to path on seeds, in order, moving on only while a
// seed cannot be reached; an answered failure is final. None reachable is
// codes.SeedsUnreachable.
func (c *Client) PostSeeds(ctx context.Context, seeds []string, path string, in, out any) error {
	var lastErr error = errors.New("no control node known")
	for _, seed := range seeds {
		lastErr = c.Call(ctx, seed, path, false, in, out)
		if !errors.Is(lastErr, ErrUnreachable) {
			return lastErr
		}
	}
	return codes.Wrap(codes.SeedsUnreachable, lastErr)
}
