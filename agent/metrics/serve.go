package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ObserveRaftApply times one raft write this node led, from Apply to
// applied (raftnode.Options.ObserveApply).
func (m *Set) ObserveRaftApply(d time.Duration) { m.raftApply.Observe(d.Seconds()) }

// Serve serves Prometheus text at /metrics on ln (metrics_addr) until ctx
// ends.
func (m *Set) Serve(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	err := srv.Serve(ln)
	<-stopped
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ListenFreebind listens on ap with IP_FREEBIND: the socket does not
// depend on the moment the address appears (Nebula gives the TUN device
// the overlay address when it starts), and survives an overlay restart.
func ListenFreebind(ctx context.Context, ap netip.AddrPort) (net.Listener, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_FREEBIND, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	return lc.Listen(ctx, "tcp", ap.String())
}
