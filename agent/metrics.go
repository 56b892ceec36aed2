package agent

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricsCollector reads the agent's state at each scrape; it keeps no
// counters of its own, so nothing can drift from what `meshctl status`
// and `meshctl nodes` show.
type metricsCollector struct{ a *Agent }

var (
	descUp            = prometheus.NewDesc("meshd_up", "1 for this meshd, labelled with its state (starting, unjoined, running).", []string{"state"}, nil)
	descNodes         = prometheus.NewDesc("meshd_cluster_nodes", "Nodes in the cluster record by role and state (control nodes only).", []string{"role", "state"}, nil)
	descRaftLeader    = prometheus.NewDesc("meshd_raft_leader", "1 if this node is the raft leader (control nodes only).", nil, nil)
	descRaftVoters    = prometheus.NewDesc("meshd_raft_voters", "Voters in this node's raft configuration (control nodes only).", nil, nil)
	descGossip        = prometheus.NewDesc("meshd_gossip_members", "Gossip members by status.", []string{"status"}, nil)
	descKeyErrors     = prometheus.NewDesc("meshd_gossip_key_errors_total", "Gossip messages no installed key could decrypt.", nil, nil)
	descTunnels       = prometheus.NewDesc("meshd_overlay_tunnels", "Established Nebula tunnels.", nil, nil)
	descBlocklist     = prometheus.NewDesc("meshd_overlay_blocklist", "Revoked certificates the overlay refuses.", nil, nil)
	descNebulaExpires = prometheus.NewDesc("meshd_nebula_cert_expiry_timestamp_seconds", "Unix time the Nebula host certificate the overlay runs with expires.", nil, nil)
	descTLSExpires    = prometheus.NewDesc("meshd_tls_cert_expiry_timestamp_seconds", "Unix time the TLS leaf this node presents (ports 7300, 7301) expires.", nil, nil)
)

func (m metricsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUp, descNodes, descRaftLeader, descRaftVoters, descGossip, descKeyErrors,
		descTunnels, descBlocklist, descNebulaExpires, descTLSExpires} {
		ch <- d
	}
}

func (m metricsCollector) Collect(ch chan<- prometheus.Metric) {
	m.a.mu.Lock()
	ph, rt := m.a.phase, m.a.rt
	m.a.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 1, string(ph))
	if rt == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descTLSExpires, prometheus.GaugeValue, float64(rt.live.Leaf().NotAfter.Unix()))
	if rt.ctl != nil {
		r := rt.ctl.Raft()
		counts := map[[2]string]float64{}
		for _, n := range r.FSM().Nodes() {
			counts[[2]string{string(n.Role), string(n.State)}]++
		}
		for k, v := range counts {
			ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, v, k[0], k[1])
		}
		leader := 0.0
		if r.IsLeader() {
			leader = 1
		}
		ch <- prometheus.MustNewConstMetric(descRaftLeader, prometheus.GaugeValue, leader)
		ch <- prometheus.MustNewConstMetric(descRaftVoters, prometheus.GaugeValue, float64(r.Voters()))
	}
	if rt.gossip != nil {
		by := map[string]float64{}
		for _, mb := range rt.gossip.Members() {
			by[string(mb.Status)]++
		}
		for s, v := range by {
			ch <- prometheus.MustNewConstMetric(descGossip, prometheus.GaugeValue, v, s)
		}
		ch <- prometheus.MustNewConstMetric(descKeyErrors, prometheus.CounterValue, float64(rt.gossip.KeyErrors()))
	}
	if o := rt.overlayStatus(); o != nil {
		ch <- prometheus.MustNewConstMetric(descTunnels, prometheus.GaugeValue, float64(len(o.Tunnels)))
		ch <- prometheus.MustNewConstMetric(descBlocklist, prometheus.GaugeValue, float64(o.Blocklist))
		if !o.CertExpires.IsZero() {
			ch <- prometheus.MustNewConstMetric(descNebulaExpires, prometheus.GaugeValue, float64(o.CertExpires.Unix()))
		}
	}
}

// serveMetrics serves Prometheus text on ln (the opt-in, loopback-only
// metrics_addr) until ctx ends. It has its own registry: nothing global.
func (a *Agent) serveMetrics(ctx context.Context, ln net.Listener) error {
	reg := prometheus.NewRegistry()
	// The Go runtime's and the process's own (go_goroutines,
	// process_open_fds, process_resident_memory_bytes, ...): what a leak
	// shows in first, and what the soak test bounds.
	reg.MustRegister(metricsCollector{a: a}, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
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
