package metrics

import (
	"errors"
	"maps"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	gometrics "github.com/rcrowley/go-metrics"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
)

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
	control := true // an unjoined node serves no control series; this one says it is a control node
	m := New("1.2.3", func() State { return State{Phase: "unjoined", Control: control} })
	// Nebula's registry is process-wide; the test reads a private one.
	neb := gometrics.NewRegistry()
	gometrics.GetOrRegisterCounter("test.packets", neb).Inc(3)
	gometrics.GetOrRegisterGauge("test.hostmap.hosts", neb).Update(2)
	gometrics.GetOrRegisterHistogram("test.handshakes", neb, gometrics.NewUniformSample(8)).Update(5)
	m.reg.MustRegister(nebulaCollector{neb})

	m.ObserveJoin(enroll.OutcomeOK, 30*time.Millisecond)
	m.ObserveJoin(codes.TokenConsumed.String(), time.Millisecond)
	m.ObserveJoin(enroll.OutcomePending, 20*time.Second)
	m.ObserveAdmit(nil)
	m.ObserveAdmit(codes.Wrap(codes.NotControl, errors.New("w1 is a worker node")))
	m.ObserveRaftApply(2 * time.Millisecond)

	problems, err := testutil.GatherAndLint(m.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	mfs, err := m.reg.Gather()
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
		{"meshd_nebula_test_packets_total", "meshd_nebula_test_packets_total 3\n"},
		{"meshd_build_info", `meshd_build_info{commit="` + buildCommit() + `",goversion="` + goruntime.Version() + `",version="1.2.3"} 1` + "\n"},
	} {
		if err := testutil.GatherAndCompare(m.reg, strings.NewReader(helpAndType(t, got[tt.metric])+tt.want), tt.metric); err != nil {
			t.Errorf("%s: %v", tt.metric, err)
		}
	}
	// The counted outcomes; every other known one is at 0
	// (TestCountersStartAtZero).
	for _, tt := range []struct {
		metric string
		want   map[string]float64
	}{
		{"meshd_joins_served_total", map[string]float64{"ok": 1, "pending": 1, "X401004TKNCNS": 1}},
		{"meshd_admissions_total", map[string]float64{"ok": 1, "X403203NOTCTL": 1}},
	} {
		got := counterValues(t, m, tt.metric)
		maps.DeleteFunc(got, func(_ string, v float64) bool { return v == 0 })
		if !maps.Equal(got, tt.want) {
			t.Errorf("%s: counted %v, want %v", tt.metric, got, tt.want)
		}
	}
	// Only successful joins are timed: a pending one waits on a person.
	if n := testutil.CollectAndCount(m.joinSeconds); n != 1 {
		t.Errorf("join duration: %d series", n)
	}
	if c := got["meshd_join_duration_seconds"].GetMetric()[0].GetHistogram().GetSampleCount(); c != 1 {
		t.Errorf("join duration: %d samples, want 1 (the ok join)", c)
	}

	// A worker (or an unjoined node) serves no control node's series.
	control = false
	if mfs, err = m.reg.Gather(); err != nil {
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
