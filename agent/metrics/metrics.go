package metrics

import (
	goruntime "runtime"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	gometrics "github.com/rcrowley/go-metrics"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
)

// State is what a node is at the moment of a scrape, as the agent reads
// it (its state, raft, gossip and overlay). The collector keeps no
// counters of its own, so nothing can drift from what `meshctl status`
// and `meshctl nodes` show.
type State struct {
	Phase   string // starting, unjoined, running, refused
	Running bool   // a member's runtime runs; the rest is read only then
	Control bool   // it runs as a control node (raft)

	TLSExpires time.Time

	Nodes         map[[2]string]int // control: nodes in the record by role and state
	Leader        bool
	Voters        int
	Commit        uint64
	Applied       uint64
	LastContact   time.Duration
	HeardLeader   bool // LastContact means something: a follower that heard from a leader
	GossipKnown   bool
	Gossip        map[string]int // members of the gossip view by status
	KeyErrors     uint64
	OverlayKnown  bool
	Tunnels       int
	Blocklist     int
	NebulaExpires time.Time

	// The node's fitness (agent/fitness): the state dir's write check,
	// and on a control node its clock against the other control nodes'.
	DiskFailing   bool
	DiskFailures  uint64
	ClockKnown    bool // a control node that measured a peer's clock
	ClockDeviates time.Duration
	ClockUntrust  bool
	// Unreachable are the members this node's own probes cannot reach
	// over the overlay (pair health).
	Unreachable int
	// Relayed are the established tunnels that go through a relay (of
	// Tunnels; the rest are direct).
	Relayed int
	// Offloads are the Nebula offloads asked for, each with whether it
	// is in use (nil when overlay_offloads is off).
	Offloads map[string]bool

	// The path upgrader (agent/pathup), since the runtime started: tries
	// that moved a relayed tunnel onto a direct path, tries in which no
	// candidate address answered (the tunnel was rebuilt), and peers not
	// tried because no direct path can reach them (counted once each
	// time one begins to be skipped).
	PathUpKnown                               bool
	PathUpDirect, PathUpFailed, PathUpSkipped uint64

	// DNS is the names' server (package names), since the runtime
	// started; nil with dns.enabled false.
	DNS *DNS

	// EphemeralReaped is how many ephemeral nodes this control node
	// removed since its runtime started (control.Plane.EphemeralReaped).
	EphemeralReaped uint64
}

// DNS are the names' counters (names.Stats, in plain types: this
// package imports no part of the runtime).
type DNS struct {
	Queries, Limited, Malformed uint64
	Rcodes                      map[string]uint64 // answers by rcode name
	// LatencyBounds are the histogram's upper bounds in seconds;
	// LatencyCounts the observations per bucket (not cumulative), the
	// last one past the last bound.
	LatencyBounds []float64
	LatencyCounts []uint64
	LatencySum    float64
	LatencyCount  uint64
}

// collector turns a State into series at each scrape.
type collector struct {
	version string
	state   func() State
}

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
	descRelayed        = prometheus.NewDesc("meshd_overlay_tunnels_relayed", "Established Nebula tunnels that go through a relay, not a direct path (of meshd_overlay_tunnels).", nil, nil)
	descPathUpTries    = prometheus.NewDesc("meshd_pathup_tries_total", "Tries to move a relayed tunnel onto a direct path since the runtime started, by outcome: direct (moved), failed (no candidate address answered; the tunnel was rebuilt) or skipped (not tried: both nodes behind NATs, one symmetric; once per peer each time it begins to be skipped).", []string{"outcome"}, nil)
	descOffload        = prometheus.NewDesc("meshd_overlay_offload", "1 for each Nebula offload overlay_offloads asked for that is in use (tso, uso, gro, gso), 0 for one the kernel or device refused; absent when overlay_offloads is off.", []string{"offload"}, nil)
	descUnreachable    = prometheus.NewDesc("meshd_overlay_unreachable_peers", "Members this node's own probes cannot reach over the overlay, though gossip may show them alive (a broken pair).", nil, nil)
	descNebulaExpires  = prometheus.NewDesc("meshd_nebula_cert_expiry_timestamp_seconds", "Unix time the Nebula host certificate the overlay runs with expires.", nil, nil)
	descTLSExpires     = prometheus.NewDesc("meshd_tls_cert_expiry_timestamp_seconds", "Unix time the TLS leaf this node presents (ports 7300, 7301) expires.", nil, nil)
	descBuildInfo      = prometheus.NewDesc("meshd_build_info", "1, labelled with the meshd version, the commit it was built from and the Go version.", []string{"version", "commit", "goversion"}, nil)
	descDiskOK         = prometheus.NewDesc("meshd_disk_check_ok", "1 if the state dir passed its last write check (a page written, synced and removed every 5 s), else 0.", nil, nil)
	descDiskFailures   = prometheus.NewDesc("meshd_disk_check_failures_total", "Failed write checks of the state dir since meshd started.", nil, nil)
	descClockDeviation = prometheus.NewDesc("meshd_clock_deviation_seconds", "How far this control node's clock runs ahead of the median of the control nodes' clocks (negative: behind); absent until a peer's clock was read (control nodes only).", nil, nil)
	descClockUntrusted = prometheus.NewDesc("meshd_clock_untrusted", "1 while this control node's clock is more than max_clock_skew from the median of the control nodes' clocks: it mints nothing, serves no join and hands off leadership (control nodes only).", nil, nil)
	descDNSQueries     = prometheus.NewDesc("meshd_dns_queries_total", "DNS queries this node's names server took (parsed, within their source's rate).", nil, nil)
	descDNSAnswers     = prometheus.NewDesc("meshd_dns_answers_total", "DNS answers sent, by rcode (NOERROR, NXDOMAIN, REFUSED: a name outside the cluster's zones, never forwarded).", []string{"rcode"}, nil)
	descDNSDropped     = prometheus.NewDesc("meshd_dns_dropped_total", "DNS packets dropped unanswered, by reason: ratelimited (over the source's rate) or malformed (not a plain query, or not parsed).", []string{"reason"}, nil)
	descDNSLatency     = prometheus.NewDesc("meshd_dns_answer_seconds", "Time from a DNS query parsed to its answer written.", nil, nil)
	descReaped         = prometheus.NewDesc("meshd_ephemeral_reaped_total", "Ephemeral nodes this control node removed since its runtime started, each down (failed or left in gossip) for ephemeral_after (control nodes only).", nil, nil)
	metricsDescriptors = []*prometheus.Desc{descDNSQueries, descDNSAnswers, descDNSDropped, descDNSLatency, descUp, descNodes, descRaftLeader, descRaftVoters, descRaftCommit, descRaftApplied,
		descRaftContact, descGossip, descKeyErrors, descTunnels, descBlocklist, descNebulaExpires, descTLSExpires, descBuildInfo,
		descDiskOK, descDiskFailures, descClockDeviation, descClockUntrusted, descUnreachable, descRelayed, descPathUpTries, descReaped, descOffload}
)

func (m collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range metricsDescriptors {
		ch <- d
	}
}

func (m collector) Collect(ch chan<- prometheus.Metric) {
	st := m.state()
	ch <- prometheus.MustNewConstMetric(descBuildInfo, prometheus.GaugeValue, 1, m.version, buildCommit(), goruntime.Version())
	ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, 1, st.Phase)
	if !st.Running {
		return
	}
	ch <- prometheus.MustNewConstMetric(descTLSExpires, prometheus.GaugeValue, float64(st.TLSExpires.Unix()))
	ch <- prometheus.MustNewConstMetric(descDiskOK, prometheus.GaugeValue, bool01(!st.DiskFailing))
	ch <- prometheus.MustNewConstMetric(descDiskFailures, prometheus.CounterValue, float64(st.DiskFailures))
	if st.Control {
		ch <- prometheus.MustNewConstMetric(descClockUntrusted, prometheus.GaugeValue, bool01(st.ClockUntrust))
		if st.ClockKnown {
			ch <- prometheus.MustNewConstMetric(descClockDeviation, prometheus.GaugeValue, st.ClockDeviates.Seconds())
		}
	}
	if st.Control {
		for k, v := range st.Nodes {
			ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(v), k[0], k[1])
		}
		leader := 0.0
		if st.Leader {
			leader = 1
		}
		ch <- prometheus.MustNewConstMetric(descRaftLeader, prometheus.GaugeValue, leader)
		ch <- prometheus.MustNewConstMetric(descRaftVoters, prometheus.GaugeValue, float64(st.Voters))
		ch <- prometheus.MustNewConstMetric(descRaftCommit, prometheus.GaugeValue, float64(st.Commit))
		ch <- prometheus.MustNewConstMetric(descRaftApplied, prometheus.GaugeValue, float64(st.Applied))
		if !st.Leader && st.HeardLeader {
			ch <- prometheus.MustNewConstMetric(descRaftContact, prometheus.GaugeValue, st.LastContact.Seconds())
		}
		ch <- prometheus.MustNewConstMetric(descReaped, prometheus.CounterValue, float64(st.EphemeralReaped))
	}
	if st.GossipKnown {
		for s, v := range st.Gossip {
			ch <- prometheus.MustNewConstMetric(descGossip, prometheus.GaugeValue, float64(v), s)
		}
		ch <- prometheus.MustNewConstMetric(descKeyErrors, prometheus.CounterValue, float64(st.KeyErrors))
	}
	if d := st.DNS; d != nil {
		collectDNS(ch, d)
	}
	if st.OverlayKnown {
		ch <- prometheus.MustNewConstMetric(descTunnels, prometheus.GaugeValue, float64(st.Tunnels))
		ch <- prometheus.MustNewConstMetric(descBlocklist, prometheus.GaugeValue, float64(st.Blocklist))
		ch <- prometheus.MustNewConstMetric(descUnreachable, prometheus.GaugeValue, float64(st.Unreachable))
		ch <- prometheus.MustNewConstMetric(descRelayed, prometheus.GaugeValue, float64(st.Relayed))
		for name, on := range st.Offloads {
			ch <- prometheus.MustNewConstMetric(descOffload, prometheus.GaugeValue, bool01(on), name)
		}
		if st.PathUpKnown {
			ch <- prometheus.MustNewConstMetric(descPathUpTries, prometheus.CounterValue, float64(st.PathUpDirect), PathUpDirect)
			ch <- prometheus.MustNewConstMetric(descPathUpTries, prometheus.CounterValue, float64(st.PathUpFailed), PathUpFailed)
			ch <- prometheus.MustNewConstMetric(descPathUpTries, prometheus.CounterValue, float64(st.PathUpSkipped), PathUpSkipped)
		}
		if !st.NebulaExpires.IsZero() {
			ch <- prometheus.MustNewConstMetric(descNebulaExpires, prometheus.GaugeValue, float64(st.NebulaExpires.Unix()))
		}
	}
}

// collectDNS writes the names' series.
func collectDNS(ch chan<- prometheus.Metric, d *DNS) {
	ch <- prometheus.MustNewConstMetric(descDNSQueries, prometheus.CounterValue, float64(d.Queries))
	for rc, n := range d.Rcodes {
		ch <- prometheus.MustNewConstMetric(descDNSAnswers, prometheus.CounterValue, float64(n), rc)
	}
	ch <- prometheus.MustNewConstMetric(descDNSDropped, prometheus.CounterValue, float64(d.Limited), "ratelimited")
	ch <- prometheus.MustNewConstMetric(descDNSDropped, prometheus.CounterValue, float64(d.Malformed), "malformed")
	buckets := make(map[float64]uint64, len(d.LatencyBounds))
	var cum uint64
	for i, b := range d.LatencyBounds {
		if i < len(d.LatencyCounts) {
			cum += d.LatencyCounts[i]
		}
		buckets[b] = cum
	}
	ch <- prometheus.MustNewConstHistogram(descDNSLatency, d.LatencyCount, d.LatencySum, buckets)
}

// The outcomes of meshd_pathup_tries_total.
const (
	PathUpDirect = "direct"
	PathUpFailed = "failed"
	// PathUpSkipped: a peer no direct path can reach was not tried.
	PathUpSkipped = "skipped"
)

// bool01 is 1 for true, 0 for false.
func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
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

// Set is the agent's registry and the counters and histograms that
// outlive a runtime (a join or a restart of the runtime keeps them). One
// per Agent: nothing global.
type Set struct {
	reg         *prometheus.Registry
	joins       *prometheus.CounterVec
	joinSeconds prometheus.Histogram
	admissions  *prometheus.CounterVec
	raftApply   prometheus.Histogram
	state       func() State
}

// latencyBuckets (seconds) span a LAN raft write (~1 ms) to a join that
// waited on a slow disk or a leader election (10 s).
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// New is the Set of a meshd of version whose state is read at every
// scrape by state.
func New(version string, state func() State) *Set {
	m := &Set{state: state,
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
	startAtZero(m.joins, joinOutcomes()) // outcomes.go: no series appears only with its first event
	startAtZero(m.admissions, admitOutcomes())
	// The Go runtime's and the process's own (go_goroutines,
	// process_open_fds, process_resident_memory_bytes, ...): what a leak
	// shows in first, and what the soak test bounds.
	m.reg.MustRegister(collector{version: version, state: state}, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		nebulaCollector{gometrics.DefaultRegistry}, m.admissions,
		controlOnly{m, []prometheus.Collector{m.joins, m.joinSeconds, m.raftApply}})
	return m
}

// controlOnly serves the series of a control node's own (joins served,
// raft apply latency) only while the node is one: a worker shows no raft.
type controlOnly struct {
	m  *Set
	cs []prometheus.Collector
}

func (c controlOnly) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range c.cs {
		x.Describe(ch)
	}
}

func (c controlOnly) Collect(ch chan<- prometheus.Metric) {
	if !c.m.state().Control {
		return
	}
	for _, x := range c.cs {
		x.Collect(ch)
	}
}

// ObserveJoin is the enroll server's Deps.Observe.
func (m *Set) ObserveJoin(outcome string, elapsed time.Duration) {
	m.joins.WithLabelValues(outcome).Inc()
	if outcome == enroll.OutcomeOK {
		m.joinSeconds.Observe(elapsed.Seconds())
	}
}

// ObserveAdmit counts one `meshctl admit` served with err.
func (m *Set) ObserveAdmit(err error) {
	outcome := enroll.OutcomeOK
	if err != nil {
		outcome = codes.OrInternal(err).String()
	}
	m.admissions.WithLabelValues(outcome).Inc()
}
