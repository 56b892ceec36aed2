package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// Internal API routes on the control port (mTLS; the caller's role is
// checked per route).
const (
	internalApplyPath      = "/v1/raft/apply"  // control: a follower forwards a write to the leader
	internalIndexPath      = "/v1/raft/index"  // control: the leader's commit index, for read-your-writes on followers
	internalRaftJoinPath   = "/v1/raft/join"   // control: a new control node asks to become a voter
	internalRaftStatsPath  = "/v1/raft/stats"  // control: this node's raft progress, read by the leader before promotion
	internalSignTLSPath    = "/v1/sign/tls"    // control: the CA holder signs a TLS leaf
	internalSignNebulaPath = "/v1/sign/nebula" // control: the CA holder signs a Nebula host cert
)

// forwardedHeader marks a request one control node passed to another; a
// forwarded request is never forwarded again (one hop).
const forwardedHeader = "Meshd-Forwarded"

// requirePeer returns the caller's node id if its verified leaf carries one
// of roles; anything else is codes.PeerRoleDenied.
func requirePeer(r *http.Request, roles ...pki.Role) (string, error) {
	if r.TLS == nil {
		return "", codes.Wrap(codes.PeerRoleDenied, errors.New("not TLS"))
	}
	role, id, _, ok := pki.PeerIdentity(*r.TLS)
	if !ok {
		return "", codes.Wrap(codes.PeerRoleDenied, errors.New("no client certificate of this cluster"))
	}
	for _, want := range roles {
		if role == want {
			return id, nil
		}
	}
	return "", codes.Wrap(codes.PeerRoleDenied, fmt.Errorf("caller %s has role %s; this route needs %v", id, role, roles))
}

// internalError is the body of a failed internal call: the local API's
// error shape plus the sentinels the program branches on.
type internalError struct {
	apitype.Error
	IPTaken bool `json:"ip_taken,omitempty"`
}

func writeInternalError(w http.ResponseWriter, err error) {
	c := codes.OrInternal(err)
	body := internalError{Error: *apitype.NewError(c, err), IPTaken: errors.Is(err, enroll.ErrIPTaken)}
	writeJSON(w, c.Status(), body)
}

// callControl POSTs (or GETs, with in == nil) JSON to a control node's
// internal API over mTLS and decodes the answer into out. A transport
// failure is returned as is (wrapping errUnreachable); an answered failure
// comes back as the coded error it carried.
func (rt *runtime) callControl(ctx context.Context, addr, path string, forwarded bool, in, out any) error {
	client, err := rt.internalClient()
	if err != nil {
		return err
	}
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
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", errUnreachable, addr, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("%w: %s: %v", errUnreachable, addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e internalError
		if json.Unmarshal(raw, &e) != nil || e.ErrCode == "" {
			return fmt.Errorf("%s answered %s", addr, resp.Status)
		}
		if e.IPTaken {
			return enroll.ErrIPTaken
		}
		return codes.Wrap(e.ErrCode, fmt.Errorf("%s: %s", addr, firstNonEmpty(e.Detail, e.Cause)))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(raw, out)
}

// askSeeds GETs path from the control nodes this node knows, in order,
// until one answers; none answering is codes.SeedsUnreachable.
func (rt *runtime) askSeeds(ctx context.Context, path string, out any) error {
	var lastErr error = errors.New("no control node known")
	for _, seed := range rt.facts.Seeds {
		err := rt.callControl(ctx, seed, path, false, nil, out)
		if err == nil {
			return nil
		}
		lastErr = err
	}
	return codes.Wrap(codes.SeedsUnreachable, fmt.Errorf("no control node answered: %v", lastErr))
}

// errUnreachable marks a control node that could not be reached at all.
var errUnreachable = errors.New("control node unreachable")
