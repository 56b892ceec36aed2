package agent

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"github.com/meshd/meshd/agent/apitype"
)

// Healthy reports whether meshd's loops still answer; meshd pings the
// systemd watchdog only while it returns nil. It asks the local API for its
// status through meshd's own socket, which exercises the accept loop, the
// handler and the agent's lock (and raft's, on a control node), and checks
// that raft has not shut down. ctx bounds the probe.
func (a *Agent) Healthy(ctx context.Context) error {
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", a.cfg.Socket)
		},
		DisableKeepAlives: true,
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+apitype.Host+apitype.PathStatus, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("local API: %w", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("local API: status %d", resp.StatusCode)
	}
	a.mu.Lock()
	rt := a.rt
	a.mu.Unlock()
	if rt != nil && rt.Plane() != nil && rt.Plane().Raft().IsShutdown() {
		return fmt.Errorf("raft has shut down")
	}
	return nil
}
