// Package metrics is meshd's Prometheus registry, one per agent: the
// series read from the node's State at each scrape (state, raft, gossip,
// overlay, certificate expiry, build), the counters and histograms that
// outlive a runtime (joins served, admissions, raft apply latency; the
// control node's own series served only while the node is one; the
// labelled counters start with every known outcome at 0, outcomes.go),
// Nebula's own counters and gauges, the Go and process collectors, and
// the /metrics listener.
//
// Import rule (deps_test.go): may import codes and enroll; nothing else of
// meshd. Only agent imports it.
package metrics
