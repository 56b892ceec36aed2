package localclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// DefaultSocket is where meshd listens unless told otherwise.
const DefaultSocket = "/run/meshd/meshd.sock"

// SocketFromEnv returns $MESHD_SOCKET, or DefaultSocket.
func SocketFromEnv() string {
	if s := os.Getenv("MESHD_SOCKET"); s != "" {
		return s
	}
	return DefaultSocket
}

// Client talks to meshd. The zero value uses DefaultSocket.
type Client struct {
	Socket  string                                                            // unix socket path
	Dial    func(ctx context.Context, network, addr string) (net.Conn, error) // nil: net.Dialer
	Version string                                                            // sent in the Meshd-Version header
}

// ErrUnreachable wraps every failure to reach the daemon at all, except a
// refusal by the socket's permissions (see dialFailure); it comes with the
// code DaemonUnreachable, on which meshctl exits 3.
var ErrUnreachable = errors.New("meshd unreachable")

func (c *Client) socket() string {
	if c.Socket != "" {
		return c.Socket
	}
	return DefaultSocket
}

func (c *Client) http() *http.Client {
	dial := c.Dial
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	sock := c.socket()
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dial(ctx, "unix", sock)
		},
		DisableKeepAlives: true,
	}}
}

func (c *Client) do(ctx context.Context, method, path string, in any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+apitype.Host+path, body)
	if err != nil {
		return nil, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Version != "" {
		req.Header.Set(apitype.VersionHeader, c.Version)
	}
	resp, err := c.http().Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, dialFailure(c.socket(), err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// dialFailure codes a request that never reached meshd. EACCES or EPERM
// means the socket is there but this user may not connect to it (0660,
// group meshd): PermissionDenied, a coded failure whose remedy is root or
// the group. Anything else (ENOENT, ECONNREFUSED, ...) means meshd is not
// answering: DaemonUnreachable.
func dialFailure(sock string, err error) error {
	if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
		return codes.Wrap(codes.PermissionDenied, fmt.Errorf("connect to %s: %w", sock, err))
	}
	return codes.Wrap(codes.DaemonUnreachable, fmt.Errorf("%w: %s: %w", ErrUnreachable, sock, err))
}

func decodeError(resp *http.Response) error {
	var e apitype.Error
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err := json.Unmarshal(b, &e); err != nil || e.ErrCode == "" {
		return apitype.NewError(codes.Internal, fmt.Errorf("HTTP %d from meshd: %.200s", resp.StatusCode, b))
	}
	return &e
}

func (c *Client) getJSON(ctx context.Context, path string, out any) error {
	resp, err := c.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(out)
}

func (c *Client) postJSON(ctx context.Context, path string, in, out any) error {
	resp, err := c.do(ctx, http.MethodPost, path, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// Status returns GET /v0/status.
func (c *Client) Status(ctx context.Context) (*apitype.Status, error) {
	var s apitype.Status
	return &s, c.getJSON(ctx, apitype.PathStatus, &s)
}

// Nodes returns GET /v0/nodes.
func (c *Client) Nodes(ctx context.Context) ([]apitype.Node, error) {
	return c.NodeList(ctx, false)
}

// NodeList is Nodes; with all, former nodes departed longer ago than the
// daemon's former_retention too (`meshctl nodes --all`).
func (c *Client) NodeList(ctx context.Context, all bool) ([]apitype.Node, error) {
	var n []apitype.Node
	path := apitype.PathNodes
	if all {
		path += "?all=1"
	}
	return n, c.getJSON(ctx, path, &n)
}

// Tokens returns GET /v0/tokens.
func (c *Client) Tokens(ctx context.Context) ([]apitype.Token, error) {
	var t []apitype.Token
	return t, c.getJSON(ctx, apitype.PathTokens, &t)
}

// Audit returns GET /v0/audit: the events of the last since (all of the
// ring when since is zero), oldest first.
func (c *Client) Audit(ctx context.Context, since time.Duration) ([]apitype.AuditEvent, error) {
	path := apitype.PathAudit
	if since > 0 {
		path += "?" + url.Values{"since": {since.String()}}.Encode()
	}
	var e []apitype.AuditEvent
	return e, c.getJSON(ctx, path, &e)
}

// Tunnels returns GET /v0/tunnels: the cluster-wide tunnel view (a
// control node; a worker answers codes.NotControl).
func (c *Client) Tunnels(ctx context.Context) (apitype.TunnelMap, error) {
	var m apitype.TunnelMap
	return m, c.getJSON(ctx, apitype.PathTunnels, &m)
}

// Init creates a cluster on this node.
func (c *Client) Init(ctx context.Context, req apitype.InitRequest) (*apitype.InitResponse, error) {
	var r apitype.InitResponse
	return &r, c.postJSON(ctx, apitype.PathInit, req, &r)
}

// Admit mints a join token.
func (c *Client) Admit(ctx context.Context, req apitype.AdmitRequest) (*apitype.AdmitResponse, error) {
	var r apitype.AdmitResponse
	return &r, c.postJSON(ctx, apitype.PathAdmit, req, &r)
}

// Leave takes this node out of its cluster and wipes its state.
func (c *Client) Leave(ctx context.Context) error {
	return c.postJSON(ctx, apitype.PathLeave, struct{}{}, nil)
}

// Remove takes the node name out of the cluster (on a control node).
func (c *Client) Remove(ctx context.Context, name string) error {
	_, err := c.RemoveWait(ctx, name, 0)
	return err
}

// RemoveWait is Remove, waiting up to wait (zero: the daemon's
// revocation_ack_timeout) for the members to acknowledge the revocation,
// and reporting who did and who did not.
func (c *Client) RemoveWait(ctx context.Context, name string, wait time.Duration) (*apitype.RemoveResponse, error) {
	var r apitype.RemoveResponse
	return &r, c.postJSON(ctx, strings.Replace(apitype.PathRemove, "{name}", url.PathEscape(name), 1),
		apitype.RemoveRequest{Wait: wait}, &r)
}

// Forget drops the record of the former node name now (on a control
// node); its revocations stay.
func (c *Client) Forget(ctx context.Context, name string) (*apitype.ForgetResponse, error) {
	var r apitype.ForgetResponse
	return &r, c.postJSON(ctx, strings.Replace(apitype.PathForget, "{name}", url.PathEscape(name), 1), struct{}{}, &r)
}

// RevokeToken revokes the unused join token with the given id (or unique
// id prefix of at least 8 hex characters), on a control node.
func (c *Client) RevokeToken(ctx context.Context, id string) (*apitype.RevokeResponse, error) {
	var r apitype.RevokeResponse
	return &r, c.postJSON(ctx, strings.Replace(apitype.PathRevokeToken, "{id}", url.PathEscape(id), 1), struct{}{}, &r)
}

// Approve approves the waiting join of a node minted with `admit
// --approve`, with the code its joiner shows (on a control node).
func (c *Client) Approve(ctx context.Context, req apitype.ApproveRequest) (*apitype.ApproveResponse, error) {
	var r apitype.ApproveResponse
	return &r, c.postJSON(ctx, apitype.PathApprove, req, &r)
}

// RotateKeys replaces the cluster's gossip key (on a control node).
func (c *Client) RotateKeys(ctx context.Context) (*apitype.KeyRotation, error) {
	var r apitype.KeyRotation
	return &r, c.postJSON(ctx, apitype.PathKeysRotate, struct{}{}, &r)
}

// Reload asks meshd to re-read its config file.
func (c *Client) Reload(ctx context.Context) ([]apitype.Warning, error) {
	var w []apitype.Warning
	return w, c.postJSON(ctx, apitype.PathReload, struct{}{}, &w)
}

// Join runs a join and calls step for every progress line as it arrives.
// It returns the result only on a confirmed success.
func (c *Client) Join(ctx context.Context, req apitype.JoinRequest, step func(apitype.JoinLine)) (*apitype.JoinResult, error) {
	resp, err := c.do(ctx, http.MethodPost, apitype.PathJoin, req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	// A stream cut short means meshd stopped mid-join: the outcome is unknown.
	var res *apitype.JoinResult
	err = readLines(resp.Body, "join", codes.JoinUnconfirmed, func(l apitype.JoinLine) (bool, error) {
		switch {
		case l.Error != nil:
			return true, l.Error
		case l.Result != nil:
			res = l.Result
			return true, nil
		case step != nil:
			step(l)
		}
		return false, nil
	})
	return res, err
}

// WaitReady polls Status until meshd answers with a state other than
// "starting", or ctx ends. For scripts and tests that start meshd.
func (c *Client) WaitReady(ctx context.Context) (*apitype.Status, error) {
	backoff := 10 * time.Millisecond
	for {
		s, err := c.Status(ctx)
		if err == nil && s.State != "starting" {
			return s, nil
		}
		select {
		case <-ctx.Done():
			if err == nil || codes.Of(err) == "" {
				err = codes.Wrap(codes.DaemonStarting, ctx.Err())
			}
			return nil, err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}
