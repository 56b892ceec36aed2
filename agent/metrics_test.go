package agent

import (
	"errors"
	"net/netip"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	gometrics "github.com/rcrowley/go-metrics"

	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
)

func TestMetricsAddr(t *testing.T) {
	for addr, ok := range map[string]bool{"": true, "127.0.0.1:9464": true, "[::1]:9464": true,
		"10.1.2.3:9464": true, "100.64.0.9:9464": true, // an overlay address: checked against the node's at start
		"0.0.0.0:9464": false, "[::]:9464": false, "224.0.0.1:9464": false, "169.254.1.1:9464": false,
		"127.0.0.1:0": false, "localhost:9464": false, "10.1.2.3": false} {
		c := config.Default()
		c.MetricsAddr = addr
		err := c.Validate()
		var ce *config.Error
		if ok != (err == nil) || (!ok && (codes.Of(err) != codes.ConfigInvalid || !errors.As(err, &ce) || ce.Field != "metrics_addr")) {
			t.Errorf("metrics_addr %q: %v", addr, err)
		}
	}
	// In userspace mode the overlay address is not the kernel's.
	c := config.Default()
	c.OverlayMode, c.MetricsAddr = config.OverlayUserspace, "10.1.2.3:9464"
	if err := c.Validate(); codes.Of(err) != codes.ConfigInvalid {
		t.Errorf("userspace, overlay metrics_addr: %v", err)
	}
	// At start: loopback or the node's own overlay address, nothing else.
	overlay := netip.MustParseAddr("10.1.2.3")
	for addr, ok := range map[string]bool{"": true, "127.0.0.1:9464": true, "10.1.2.3:9464": true, "10.1.2.4:9464": false} {
		c := config.Default()
		c.MetricsAddr = addr
		if err := c.CheckMetricsOverlay(overlay); ok != (err == nil) || (!ok && codes.Of(err) != codes.MetricsAddrRefused) {
			t.Errorf("metrics_addr %q on node %s: %v", addr, overlay, err)
		}
	}
}

// wantSeries is every series an unjoined agent's registry has of its own,
// with its type and labels (the rest need a runtime: agenttest.TestMetrics
// and the e2e TestMetricsScrape).
var wantSeries = map[string]struct {
	typ    dto.MetricType
	labels []string
}{
	"meshd_build_info":                  {dto.MetricType_GAUGE, []string{"commit", "goversion", "version"}},
	"meshd_up":                          {dto.MetricType_GAUGE, []string{"state"}},
	"meshd_joins_served_total":          {dto.MetricType_COUNTER, []string{"code"}},
	"meshd_join_duration_seconds":       {dto.MetricType_HISTOGRAM, nil},
	"meshd_admissions_total":            {dto.MetricType_COUNTER, []string{"code"}},
	"meshd_raft_apply_duration_seconds": {dto.MetricType_HISTOGRAM, nil},
	"meshd_nebula_test_packets_total":   {dto.MetricType_COUNTER, nil},
	"meshd_nebula_test_hostmap_hosts":   {dto.MetricType_GAUGE, nil},
	"go_goroutines":                     {dto.MetricType_GAUGE, nil},
	"process_open_fds":                  {dto.MetricType_GAUGE, nil},
}

// TestMetricsRegistry: names, types, help and labels of the agent's own
// series, values of the counters it keeps, and client_golang's lint over
// everything the registry serves.
func TestMetricsRegistry(t *testing.T) {
	a, err := New(config.Default(), Deps{Version: "1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	// Nebula's registry is process-wide; the test reads a private one.
	neb := gometrics.NewRegistry()
	gometrics.GetOrRegisterCounter("test.packets", neb).Inc(3)
	gometrics.GetOrRegisterGauge("test.hostmap.hosts", neb).Update(2)
	gometrics.GetOrRegisterHistogram("test.handshakes", neb, gometrics.NewUniformSample(8)).Update(5)
	a.met.reg.MustRegister(nebulaCollector{neb})
	a.met.isControl = func() bool { return true } // an unjoined agent serves no control series

	a.met.observeJoin(enroll.OutcomeOK, 30*time.Millisecond)
	a.met.observeJoin(codes.TokenConsumed.String(), time.Millisecond)
	a.met.observeJoin(enroll.OutcomePending, 20*time.Second)
	a.met.observeAdmit(nil)
	a.met.observeAdmit(codes.Wrap(codes.NotControl, errors.New("w1 is a worker node")))
	a.met.raftApply.Observe(0.002)

	problems, err := testutil.GatherAndLint(a.met.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	mfs, err := a.met.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf
		if mf.GetHelp() == "" {
			t.Errorf("%s has no help", mf.GetName())
		}
		if strings.HasPrefix(mf.GetName(), "meshd_nebula_test_handshakes") {
			t.Errorf("%s: a go-metrics histogram is exported", mf.GetName())
		}
	}
	for name, want := range wantSeries {
		mf, ok := got[name]
		if !ok {
			t.Errorf("no %s", name)
			continue
		}
		if mf.GetType() != want.typ {
			t.Errorf("%s is a %s, want %s", name, mf.GetType(), want.typ)
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName())
			}
			if !slices.Equal(labels, want.labels) {
				t.Errorf("%s labels %q, want %q", name, labels, want.labels)
			}
		}
	}
	for _, tt := range []struct {
		metric string
		want   string
	}{
		{"meshd_joins_served_total", `meshd_joins_served_total{code="ok"} 1
meshd_joins_served_total{code="pending"} 1
meshd_joins_served_total{code="X401004TKNCNS"} 1
`},
		{"meshd_admissions_total", `meshd_admissions_total{code="ok"} 1
meshd_admissions_total{code="X403203NOTCTL"} 1
`},
		{"meshd_nebula_test_packets_total", "meshd_nebula_test_packets_total 3\n"},
		{"meshd_build_info", `meshd_build_info{commit="` + buildCommit() + `",goversion="` + goruntime.Version() + `",version="1.2.3"} 1` + "\n"},
	} {
		if err := testutil.GatherAndCompare(a.met.reg, strings.NewReader(helpAndType(t, got[tt.metric])+tt.want), tt.metric); err != nil {
			t.Errorf("%s: %v", tt.metric, err)
		}
	}
	// Only successful joins are timed: a pending one waits on a person.
	if n := testutil.CollectAndCount(a.met.joinSeconds); n != 1 {
		t.Errorf("join duration: %d series", n)
	}
	if c := got["meshd_join_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleCount(); c != 1 {
		t.Errorf("join duration: %d samples, want 1 (the ok join)", c)
	}

	// A worker (or an unjoined node) serves no control node's series.
	a.met.isControl = func() bool { return false }
	if mfs, err = a.met.reg.Gather(); err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if n := mf.GetName(); strings.HasPrefix(n, "meshd_raft_") || strings.HasPrefix(n, "meshd_join") {
			t.Errorf("%s served by a node that is not a control node", n)
		}
	}
}

// helpAndType is the # HELP and # TYPE lines of mf, for GatherAndCompare.
func helpAndType(t *testing.T, mf *dto.MetricFamily) string {
	t.Helper()
	if mf == nil {
		t.Fatal("no such metric")
	}
	return "# HELP " + mf.GetName() + " " + mf.GetHelp() + "\n# TYPE " + mf.GetName() + " " + strings.ToLower(mf.GetType().String()) + "\n"
}

var _ prometheus.Collector = nebulaCollector{}
