package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestDNSSeries: a member serving the names serves its queries, answers
// by rcode, drops by reason and the answer latency as a histogram with
// cumulative buckets; the series lint clean; a node without names serves
// none of them.
func TestDNSSeries(t *testing.T) {
	st := State{Phase: "running", Running: true, DNS: &DNS{Queries: 7, Limited: 2, Malformed: 1,
		Rcodes:        map[string]uint64{"NOERROR": 5, "NXDOMAIN": 1, "REFUSED": 1},
		LatencyBounds: []float64{0.0001, 0.001}, LatencyCounts: []uint64{4, 2, 1}, LatencySum: 0.0042, LatencyCount: 7}}
	m := New("1.2.3", func() State { return st })
	const want = "# HELP meshd_dns_answer_seconds Time from a DNS query parsed to its answer written.\n" +
		"# TYPE meshd_dns_answer_seconds histogram\n" +
		"meshd_dns_answer_seconds_bucket{le=\"0.0001\"} 4\n" +
		"meshd_dns_answer_seconds_bucket{le=\"0.001\"} 6\n" +
		"meshd_dns_answer_seconds_bucket{le=\"+Inf\"} 7\n" +
		"meshd_dns_answer_seconds_sum 0.0042\n" +
		"meshd_dns_answer_seconds_count 7\n" +
		"# HELP meshd_dns_answers_total DNS answers sent, by rcode (NOERROR, NXDOMAIN, REFUSED: a name outside the cluster's zones, never forwarded).\n" +
		"# TYPE meshd_dns_answers_total counter\n" +
		"meshd_dns_answers_total{rcode=\"NOERROR\"} 5\n" +
		"meshd_dns_answers_total{rcode=\"NXDOMAIN\"} 1\n" +
		"meshd_dns_answers_total{rcode=\"REFUSED\"} 1\n" +
		"# HELP meshd_dns_dropped_total DNS packets dropped unanswered, by reason: ratelimited (over the source's rate) or malformed (not a plain query, or not parsed).\n" +
		"# TYPE meshd_dns_dropped_total counter\n" +
		"meshd_dns_dropped_total{reason=\"malformed\"} 1\n" +
		"meshd_dns_dropped_total{reason=\"ratelimited\"} 2\n" +
		"# HELP meshd_dns_queries_total DNS queries this node's names server took (parsed, within their source's rate).\n" +
		"# TYPE meshd_dns_queries_total counter\n" +
		"meshd_dns_queries_total 7\n"
	names := []string{"meshd_dns_answer_seconds", "meshd_dns_answers_total", "meshd_dns_dropped_total", "meshd_dns_queries_total"}
	if err := testutil.GatherAndCompare(m.reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.GatherAndLint(m.reg, names...); err != nil || len(problems) != 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	st.DNS = nil
	if n, err := testutil.GatherAndCount(m.reg, names...); err != nil || n != 0 {
		t.Errorf("no names: %d series (%v), want none", n, err)
	}
}
