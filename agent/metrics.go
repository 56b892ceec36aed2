package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	goruntime "runtime"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	gometrics "github.com/rcrowley/go-metrics"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
)

// metricsCollector reads the agent's state at each scrape; it keeps no
// counters of its own, so nothing can drift from what `meshctl status`
// and `meshctl nodes` show.
type metricsCollector struct{ a *Agent }

var (
	descUp             = prometheus.NewDesc("meshd_up", "1 for this meshd, labelled with its state (starting, unjoined, running, refused).", []string{"state"}, nil)
	descNodes          = prometheus.NewDesc("meshd_cluster_nodes", "Nodes in the cluster record by role and state (control nodes only).", []string{"role", "state"}, nil)
	descRaftLeader     = prometheus.NewDesc("meshd_raft_leader", "1 if this node is the raft leader (control nodes only).", nil, nil)
	descRaftVoters     = prometheus.NewDesc("meshd_raft_voters", "Voters in this node's raft configuration (control nodes only).", nil, nil)
	descRaftCommit     = prometheus.NewDesc("meshd_raft_commit_index", "Highest raft log index this node knows committed (control nodes only).", nil, nil)
	descRaftApplied    = prometheus.NewDesc("meshd_raft_applied_index", "Highest raft log index this node's state machine applied (control nodes only).", nil, nil)
	descRaftContact    = prometheus.NewDesc("meshd_raft_last_contact_seconds", "Seconds since this node last heard from a raft leader; absent on a leader and on a node that never heard from one (control nodes only).", nil, nil)
	descGossip         = prometheus.NewDesc("meshd_gossip_members", "Gossip members by status.", []string{"status"}, nil)
	descKeyErrors      = prometheus.NewDesc("meshd_gossip_key_errors_total", "Gossip messages no installed key could decrypt.", nil, nil)
	descTunnels        = prometheus.NewDesc("meshd_overlay_tunnels", "Established Nebula tunnels.", nil, nil)
	descBlocklist      = prometheus.NewDesc("meshd_overlay_blocklist", "Revoked certificates the overlay refuses.", nil, nil)
	descNebulaExpires  = prometheus.NewDesc("meshd_nebula_cert_expiry_timestamp_seconds", "Unix time the Nebula host certificate the overlay runs with expires.", nil, nil)
	descTLSExpires     = prometheus.NewDesc("meshd_tls_cert_expiry_timestamp_seconds", "Unix time the TLS leaf this node presents (ports 7300, 7301) expires.", nil, nil)
	descBuildInfo      = prometheus.NewDesc("meshd_build_info", "1, labelled with the meshd version, the commit it was built from and the Go version.", []string{"version", "commit", "goversion"}, nil)
	metricsDescriptors = []*prometheus.Desc{descUp, descNodes, descRaftLeader, descRaftVoters, descRaftCommit, descRaftApplied,
		descRaftContact, descGossip, descKeyErrors, descTunnels, descBlocklist, descNebulaExpires, descTLSExpires, descBuildInfo}
)

func (m metricsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range metricsDescriptors {
		ch <- d
	}
}

func (m metricsCollector) Collect(ch chan<- prometheus.Metric) {
	m.a.mu.Lock()
	ph, rt := m.a.phase, m.a.rt
	m.a.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(descBuildInfo, prometheus.GaugeValue, 1, m.a.d.Version, buildCommit(), goruntime.Version())
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
		p := r.Progress()
		ch <- prometheus.MustNewConstMetric(descRaftCommit, prometheus.GaugeValue, float64(r.CommitIndex()))
		ch <- prometheus.MustNewConstMetric(descRaftApplied, prometheus.GaugeValue, float64(p.AppliedIndex))
		if !r.IsLeader() && p.LastContact >= 0 {
			ch <- prometheus.MustNewConstMetric(descRaftContact, prometheus.GaugeValue, p.LastContact.Seconds())
		}
	}
	if rt.gossip != nil {
		by := map[string]float64{}
		for _, st := range rt.gossipView() {
			by[string(st)]++
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

// buildCommit is the VCS revision the Go toolchain stamped into this
// binary ("-dirty" appended for a modified tree), or "unknown".
func buildCommit() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// agentMetrics are the agent's registry and the counters and histograms
// that outlive a runtime (a join or a restart of the runtime keeps them).
// One per Agent: nothing global.
type agentMetrics struct {
	reg         *prometheus.Registry
	joins       *prometheus.CounterVec
	joinSeconds prometheus.Histogram
	admissions  *prometheus.CounterVec
	raftApply   prometheus.Histogram
	isControl   func() bool // Agent.isControl; a test may replace it
}

// latencyBuckets (seconds) span a LAN raft write (~1 ms) to a join that
// waited on a slow disk or a leader election (10 s).
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

func newAgentMetrics(a *Agent) *agentMetrics {
	m := &agentMetrics{
		reg: prometheus.NewRegistry(),
		joins: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshd_joins_served_total",
			Help: "Join requests this node's enroll endpoint answered, by outcome: ok, pending (waits for approval) or the refusal's code (control nodes only)."}, []string{"code"}),
		joinSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "meshd_join_duration_seconds",
			Help: "Seconds this node took to serve a successful join request: checks, admission, signing (control nodes only).", Buckets: latencyBuckets}),
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "meshd_admissions_total",
			Help: "`meshctl admit` requests this node served, by outcome: ok (a token was minted) or the refusal's code."}, []string{"code"}),
		raftApply: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "meshd_raft_apply_duration_seconds",
			Help: "Seconds from a raft write this node led to its being committed by a quorum and applied (control nodes only).", Buckets: latencyBuckets}),
	}
	// The Go runtime's and the process's own (go_goroutines,
	// process_open_fds, process_resident_memory_bytes, ...): what a leak
	// shows in first, and what the soak test bounds.
	m.isControl = a.isControl
	m.reg.MustRegister(metricsCollector{a: a}, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		nebulaCollector{gometrics.DefaultRegistry}, m.admissions,
		controlOnly{m, []prometheus.Collector{m.joins, m.joinSeconds, m.raftApply}})
	return m
}

// isControl reports whether this node runs as a control node now.
func (a *Agent) isControl() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rt != nil && a.rt.ctl != nil
}

// controlOnly serves the series of a control node's own (joins served,
// raft apply latency) only while the node is one: a worker shows no raft.
type controlOnly struct {
	m  *agentMetrics
	cs []prometheus.Collector
}

func (c controlOnly) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range c.cs {
		x.Describe(ch)
	}
}

func (c controlOnly) Collect(ch chan<- prometheus.Metric) {
	if !c.m.isControl() {
		return
	}
	for _, x := range c.cs {
		x.Collect(ch)
	}
}

// observeJoin is the enroll server's Deps.Observe.
func (m *agentMetrics) observeJoin(outcome string, elapsed time.Duration) {
	m.joins.WithLabelValues(outcome).Inc()
	if outcome == enroll.OutcomeOK {
		m.joinSeconds.Observe(elapsed.Seconds())
	}
}

// observeAdmit counts one `meshctl admit` served with err.
func (m *agentMetrics) observeAdmit(err error) {
	outcome := enroll.OutcomeOK
	if err != nil {
		outcome = codes.OrInternal(err).String()
	}
	m.admissions.WithLabelValues(outcome).Inc()
}

// nebulaCollector exports the counters and gauges Nebula keeps in its
// go-metrics registry (handshakes, hostmap sizes, lost and duplicate
// packets, cached packets, ...) as meshd_nebula_<name>, counters with
// _total. Nebula registers them in go-metrics' process-wide registry
// whether or not its own stats listener is configured (meshd never
// configures it: it would serve on http.DefaultServeMux and exit the
// process on a listen error); this collector only reads them. Histograms,
// meters and timers are left out. Their names vary with the host (one
// set of udp gauges per reader), so the collector is unchecked.
type nebulaCollector struct{ r gometrics.Registry }

var nebulaNameChars = regexp.MustCompile(`[^a-zA-Z0-9_]+`)

func nebulaMetricName(name string) string {
	return "meshd_nebula_" + nebulaNameChars.ReplaceAllString(name, "_")
}

func (nebulaCollector) Describe(chan<- *prometheus.Desc) {}

func (c nebulaCollector) Collect(ch chan<- prometheus.Metric) {
	c.r.Each(func(name string, i any) {
		var (
			typ  prometheus.ValueType
			v    float64
			full = nebulaMetricName(name)
		)
		switch m := i.(type) {
		case gometrics.Counter:
			typ, v, full = prometheus.CounterValue, float64(m.Count()), full+"_total"
		case gometrics.Gauge:
			typ, v = prometheus.GaugeValue, float64(m.Value())
		case gometrics.GaugeFloat64:
			typ, v = prometheus.GaugeValue, m.Value()
		default:
			return
		}
		desc := prometheus.NewDesc(full, fmt.Sprintf("Nebula's own %q (go-metrics).", name), nil, nil)
		ch <- prometheus.MustNewConstMetric(desc, typ, v)
	})
}

// serveMetrics serves Prometheus text on ln (metrics_addr) until ctx
// ends, from the agent's registry.
func (a *Agent) serveMetrics(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.met.reg, promhttp.HandlerOpts{}))
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

// metricsAddr is metrics_addr parsed (Validate checked it) and whether it
// is a loopback address, served from the start, rather than the node's
// overlay address, served while the node runs.
func (c FileConfig) metricsAddr() (ap netip.AddrPort, loopback, ok bool) {
	if c.MetricsAddr == "" {
		return netip.AddrPort{}, false, false
	}
	ap, err := netip.ParseAddrPort(c.MetricsAddr)
	if err != nil {
		return netip.AddrPort{}, false, false
	}
	return ap, ap.Addr().IsLoopback(), true
}

// validMetricsAddr is Validate's check of metrics_addr: a loopback IP and
// port, or (kernel overlay mode) a unicast IP and port that must be the
// node's overlay address (checkMetricsOverlay, once it is known).
func (c FileConfig) validMetricsAddr() error {
	ap, err := netip.ParseAddrPort(c.MetricsAddr)
	switch {
	case err != nil || ap.Port() == 0:
		return errors.New("must be IP:port with a port, e.g. 127.0.0.1:9464, or this node's overlay IP and a port")
	case ap.Addr().IsLoopback():
		return nil
	case c.OverlayMode == OverlayUserspace:
		return errors.New("must be a loopback IP in userspace overlay mode: the overlay address is not the kernel's")
	case !ap.Addr().IsGlobalUnicast():
		return errors.New("must be a loopback IP or this node's overlay IP")
	}
	return nil
}

// checkMetricsOverlay refuses (codes.MetricsAddrRefused) a metrics_addr
// that is neither loopback nor this node's overlay address.
func (c FileConfig) checkMetricsOverlay(overlay netip.Addr) error {
	ap, loopback, ok := c.metricsAddr()
	if !ok || loopback || ap.Addr() == overlay {
		return nil
	}
	return codes.Wrap(codes.MetricsAddrRefused, fmt.Errorf("metrics_addr %s is neither loopback nor this node's overlay address %s", ap, overlay))
}

// startOverlayMetrics serves metrics on the node's overlay address, when
// metrics_addr names it, until ctx ends. The socket is bound with
// IP_FREEBIND: it does not depend on the moment Nebula gives the TUN
// device its address, and survives an overlay restart.
func (a *Agent) startOverlayMetrics(ctx context.Context, rt *runtime) {
	ap, loopback, ok := a.cfg.metricsAddr()
	if !ok || loopback {
		return
	}
	if err := a.cfg.checkMetricsOverlay(rt.overlayAddr()); err != nil {
		a.log.Error("metrics are not served", "code", codes.OrInternal(err), "err", err)
		return
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, syscall.IP_FREEBIND, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(ctx, "tcp", ap.String())
	if err != nil {
		a.log.Error("metrics are not served", "code", codes.MetricsAddrRefused, "addr", ap, "err", err)
		return
	}
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		if err := a.serveMetrics(ctx, ln); err != nil {
			a.log.Warn("metrics listener", "err", err)
		}
	}()
}
