package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
)

// The labelled counters start with every outcome they can count at 0, so
// that each series exists from the first scrape after a start: a series
// that appears only with its first event has no earlier sample, and
// Prometheus's increase() and rate() miss that event (the refused-join
// alert would not fire for the first refusal of a code after a restart).
//
// The label's values are bounded by the code table (enroll.Outcome and
// ObserveAdmit label a refusal with its code, codes.Internal for an
// uncoded one), and which of them a route can answer depends on its
// collaborators too (the ledger answers NoLeader, a full disk DiskFull,
// ...). So the known values are the table's failure codes (status 400
// and up: not events, not warnings), whether or not a route has answered
// one yet; a code added to the table starts at 0 with nothing to update
// here.

// joinOutcomes are the label values of meshd_joins_served_total: ok,
// pending, and every failure code.
func joinOutcomes() []string {
	return append([]string{enroll.OutcomeOK, enroll.OutcomePending}, failureCodes()...)
}

// admitOutcomes are the label values of meshd_admissions_total: ok and
// every failure code (an admission never waits).
func admitOutcomes() []string {
	return append([]string{enroll.OutcomeOK}, failureCodes()...)
}

// failureCodes is every code of the table that a refusal can carry.
func failureCodes() []string {
	var out []string
	for _, c := range codes.All() {
		if c.Status() >= 400 {
			out = append(out, c.String())
		}
	}
	return out
}

// startAtZero creates cv's series for each of values, at 0.
func startAtZero(cv *prometheus.CounterVec, values []string) {
	for _, v := range values {
		cv.WithLabelValues(v)
	}
}
