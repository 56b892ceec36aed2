package localclient

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/meshd/meshd/agent/apitype"
)

// DaemonVersion returns GET /v0/version. A meshd older than that route
// answers 404 but names its version in the VersionHeader, as every answer
// of the local API does; its Build then holds that version alone (commit
// and Go "unknown").
func (c *Client) DaemonVersion(ctx context.Context) (apitype.Build, error) {
	var b apitype.Build
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+apitype.Host+apitype.PathVersion, nil)
	if err != nil {
		return b, err
	}
	if c.Version != "" {
		req.Header.Set(apitype.VersionHeader, c.Version)
	}
	resp, err := c.http().Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return b, ctx.Err()
		}
		return b, dialFailure(c.socket(), err)
	}
	defer resp.Body.Close()
	v := resp.Header.Get(apitype.VersionHeader)
	switch {
	case resp.StatusCode == http.StatusNotFound && v != "":
		return apitype.Build{Version: v, Commit: "unknown", Go: "unknown"}, nil
	case resp.StatusCode >= 300:
		return b, decodeError(resp)
	}
	return b, json.NewDecoder(resp.Body).Decode(&b)
}
