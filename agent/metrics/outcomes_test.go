package metrics

import (
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
)

// TestCountersStartAtZero (issue 28 item 5): right after New, before any
// event, a control node's registry has meshd_joins_served_total at 0 for
// ok, pending and every failure code of the table, and
// meshd_admissions_total at 0 for ok and every failure code; no event or
// warning code is a label value. A worker serves the admissions at 0 and
// no joins. An event moves its own series only.
func TestCountersStartAtZero(t *testing.T) {
	m := New("1.2.3", func() State { return State{Phase: "running", Running: true, Control: true} })

	joins, admits := counterValues(t, m, "meshd_joins_served_total"), counterValues(t, m, "meshd_admissions_total")
	// Refusals an operator alerts on, named, so that the test does not
	// only repeat the rule of outcomes.go.
	for _, c := range []codes.Code{codes.TokenConsumed, codes.TokenExpired, codes.TokenRevoked, codes.TokenUnknown,
		codes.TokenCorrupt, codes.TokenThrottled, codes.ClockSkew, codes.NameTaken, codes.NoLeader, codes.CAHolderDown,
		codes.ApprovalTimeout, codes.ApprovalBurnt, codes.EnrollRejected, codes.DiskFull, codes.Internal} {
		if v, ok := joins[c.String()]; !ok || v != 0 {
			t.Errorf("meshd_joins_served_total{code=%q} = %v (present %t), want 0", c, v, ok)
		}
	}
	for _, c := range []codes.Code{codes.NotControl, codes.NameTaken, codes.BadNodeName, codes.BadRole, codes.TokenBadTTL,
		codes.BadGroup, codes.NoLeader, codes.NotInCluster, codes.Internal} {
		if v, ok := admits[c.String()]; !ok || v != 0 {
			t.Errorf("meshd_admissions_total{code=%q} = %v (present %t), want 0", c, v, ok)
		}
	}
	for _, tc := range []struct {
		metric string
		got    map[string]float64
		extra  []string
	}{
		{"meshd_joins_served_total", joins, []string{enroll.OutcomeOK, enroll.OutcomePending}},
		{"meshd_admissions_total", admits, []string{enroll.OutcomeOK}},
	} {
		want := map[string]bool{}
		for _, v := range tc.extra {
			want[v] = true
		}
		for _, c := range codes.All() {
			if c.Status() >= 400 {
				want[c.String()] = true
			}
		}
		for v := range want {
			if n, ok := tc.got[v]; !ok || n != 0 {
				t.Errorf("%s{code=%q} = %v (present %t), want 0", tc.metric, v, n, ok)
			}
		}
		for v := range tc.got {
			if !want[v] {
				t.Errorf("%s{code=%q}: not a known outcome (an event, a warning or pending on admissions)", tc.metric, v)
			}
		}
	}

	m.ObserveJoin(codes.TokenConsumed.String(), time.Millisecond)
	m.ObserveAdmit(codes.Wrap(codes.NotControl, nil))
	after := counterValues(t, m, "meshd_joins_served_total")
	if after[codes.TokenConsumed.String()] != 1 || after[codes.TokenExpired.String()] != 0 || after[enroll.OutcomeOK] != 0 || len(after) != len(joins) {
		t.Errorf("after one TokenConsumed refusal: consumed %v, expired %v, ok %v, %d series (were %d)",
			after[codes.TokenConsumed.String()], after[codes.TokenExpired.String()], after[enroll.OutcomeOK], len(after), len(joins))
	}
	if a := counterValues(t, m, "meshd_admissions_total"); a[codes.NotControl.String()] != 1 || a[enroll.OutcomeOK] != 0 {
		t.Errorf("after one NotControl refusal: %v, ok %v", a[codes.NotControl.String()], a[enroll.OutcomeOK])
	}

	w := New("1.2.3", func() State { return State{Phase: "running", Running: true} })
	if v, ok := counterValues(t, w, "meshd_admissions_total")[enroll.OutcomeOK]; !ok || v != 0 {
		t.Errorf("worker: meshd_admissions_total{code=ok} = %v (present %t), want 0", v, ok)
	}
	if got := counterValues(t, w, "meshd_joins_served_total"); len(got) != 0 {
		t.Errorf("worker: %d meshd_joins_served_total series, want none (control nodes only)", len(got))
	}
}

// counterValues gathers m's registry and returns the counter name's
// values by their code label (empty when the family is not served).
func counterValues(t *testing.T, m *Set, name string) map[string]float64 {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		if mf.GetType() != dto.MetricType_COUNTER {
			t.Fatalf("%s is a %s", name, mf.GetType())
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "code" {
					out[l.GetValue()] = s.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}
