//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// scrape fetches http://addr/metrics from inside from's namespace and
// returns each sample's value by its series ("name{labels}" as written).
func scrape(ctx context.Context, from *Node, addr string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := from.Exec(ctx, "curl", "-sfS", "--max-time", "3", "http://"+addr+"/metrics").Output()
	if err != nil {
		return nil, fmt.Errorf("scrape %s from %s: %w", addr, from.NodeName, err)
	}
	series := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("scrape %s: line %q: %w", addr, line, err)
		}
		series[line[:i]] = v
	}
	return series, sc.Err()
}

// withPrefix is the first series whose text starts with prefix.
func withPrefix(series map[string]float64, prefix string) (string, float64, bool) {
	for k, v := range series {
		if strings.HasPrefix(k, prefix) {
			return k, v, true
		}
	}
	return "", 0, false
}

// setConfigLine writes nd's config as it was made plus line.
func setConfigLine(t testing.TB, nd *Node, base []byte, line string) {
	t.Helper()
	if err := os.WriteFile(nd.Config, append(append([]byte{}, base...), line+"\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestMetricsScrape: the origin serves metrics on loopback, a worker on
// its overlay address; a scrape of the worker from the origin's namespace
// over the overlay, and of the origin from its own, show the series and
// values a dashboard needs (the worker's join counted once as ok on the
// origin, build info, certificate expiry in the future, raft on the control
// node only). A metrics_addr that is neither loopback nor the node's
// overlay address stops meshd with MetricsAddrRefused. Right after init,
// and again right after a restart, the origin's labelled counters are
// series at 0 for every known outcome (ok, pending, refusal codes), not
// absent until their first event.
func TestMetricsScrape(t *testing.T) {
	n := NewNet(t)
	origin := n.NewNode("origin")
	base, err := os.ReadFile(origin.Config)
	if err != nil {
		t.Fatal(err)
	}
	setConfigLine(t, origin, base, "metrics_addr: 127.0.0.1:9464")
	origin.Start(t)
	origin.MustCtl(t, "init", "--cluster", "e2e")
	// A fresh control node: every known outcome is a series at 0 before
	// its first event (issue 28 item 5), so increase() and rate() count
	// that event. The loopback listener is bound before meshd answers.
	fresh, err := scrape(t.Context(), origin, "127.0.0.1:9464")
	if err != nil {
		t.Fatal(err)
	}
	checkStartAtZero(t, "origin after init", fresh)
	w1 := n.NewNode("w1")
	w1.Start(t)
	w1.MustCtl(t, "join", origin.Admit(t, "w1"))
	var ost, wst apitype.Status
	if err := origin.CtlJSON(t.Context(), &ost, "status"); err != nil {
		t.Fatal(err)
	}
	if err := w1.CtlJSON(t.Context(), &wst, "status"); err != nil {
		t.Fatal(err)
	}

	// Another node's overlay address is refused, with its code.
	wbase, err := os.ReadFile(w1.Config)
	if err != nil {
		t.Fatal(err)
	}
	w1.Stop(t)
	setConfigLine(t, w1, wbase, "metrics_addr: "+ost.OverlayIP+":9464")
	if err := w1.start(t.Context()); err == nil {
		t.Fatal("w1 started with the origin's overlay address as metrics_addr")
	}
	if b, _ := os.ReadFile(w1.LogPath); !strings.Contains(string(b), string(codes.MetricsAddrRefused)) {
		t.Fatalf("w1's log does not give %s", codes.MetricsAddrRefused)
	}
	w1Addr := wst.OverlayIP + ":9464"
	setConfigLine(t, w1, wbase, "metrics_addr: "+w1Addr)
	w1.Start(t)

	now := float64(time.Now().Unix())
	var wm map[string]float64
	took := Eventually(t, 15*time.Second, "a scrape of w1 over the overlay from the origin", func() error {
		wm, err = scrape(t.Context(), origin, w1Addr)
		return err
	})
	t.Logf("w1 scraped over the overlay %s after its restart", took.Round(time.Millisecond))
	om, err := scrape(t.Context(), origin, "127.0.0.1:9464")
	if err != nil {
		t.Fatal(err)
	}
	// Bound to the overlay address only: not on the underlay.
	if _, err := scrape(t.Context(), origin, w1.IP+":9464"); err == nil {
		t.Errorf("w1 serves metrics on its underlay address %s too", w1.IP)
	}

	for node, m := range map[string]map[string]float64{"origin": om, "w1": wm} {
		if _, v, ok := withPrefix(m, "meshd_build_info{"); !ok || v != 1 {
			t.Errorf("%s: meshd_build_info %v %v", node, v, ok)
		}
		if v := m[`meshd_up{state="running"}`]; v != 1 {
			t.Errorf("%s: meshd_up{state=running} %v", node, v)
		}
		for _, name := range []string{"meshd_tls_cert_expiry_timestamp_seconds", "meshd_nebula_cert_expiry_timestamp_seconds"} {
			if v := m[name]; v <= now {
				t.Errorf("%s: %s %v, want after now (%v)", node, name, v, now)
			}
		}
		if v := m["meshd_overlay_tunnels"]; v < 1 {
			t.Errorf("%s: meshd_overlay_tunnels %v", node, v)
		}
		// On one LAN every tunnel is direct, and nothing needed moving.
		for _, name := range []string{"meshd_overlay_tunnels_relayed", `meshd_pathup_tries_total{outcome="direct"}`, `meshd_pathup_tries_total{outcome="failed"}`, `meshd_pathup_tries_total{outcome="skipped"}`} {
			if v, ok := m[name]; !ok || v != 0 {
				t.Errorf("%s: %s %v (served %v), want 0", node, name, v, ok)
			}
		}
		// The gossip pool: the origin alone (w1 is out of it, a worker's
		// default), and no gossip series on w1, which runs none.
		if v, ok := m[`meshd_gossip_members{status="alive"}`]; node == "origin" && (!ok || v != 1) || node == "w1" && ok {
			t.Errorf("%s: meshd_gossip_members{status=alive} %v (served %v), want 1 on the origin, none on w1", node, v, ok)
		}
		for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "meshd_nebula_handshake_manager_initiated_total"} {
			if _, ok := m[name]; !ok {
				t.Errorf("%s: no %s", node, name)
			}
		}
	}
	for series, want := range map[string]float64{
		`meshd_joins_served_total{code="ok"}`:                1,
		`meshd_admissions_total{code="ok"}`:                  1,
		"meshd_join_duration_seconds_count":                  1,
		"meshd_raft_leader":                                  1,
		"meshd_raft_voters":                                  1,
		`meshd_cluster_nodes{role="worker",state="active"}`:  1,
		`meshd_cluster_nodes{role="control",state="active"}`: 1,
	} {
		if v, ok := om[series]; !ok || v != want {
			t.Errorf("origin: %s = %v (present %v), want %v", series, v, ok, want)
		}
	}
	for k, v := range om {
		if strings.HasPrefix(k, "meshd_joins_served_total{") && k != `meshd_joins_served_total{code="ok"}` && v != 0 {
			t.Errorf("origin: %s %v: a join was refused", k, v)
		}
	}
	if v := om["meshd_raft_apply_duration_seconds_count"]; v < 1 {
		t.Errorf("origin: meshd_raft_apply_duration_seconds_count %v", v)
	}
	if v, a := om["meshd_raft_commit_index"], om["meshd_raft_applied_index"]; v < 1 || a < 1 || a > v {
		t.Errorf("origin: commit index %v, applied %v", v, om["meshd_raft_applied_index"])
	}
	if k, _, ok := withPrefix(wm, "meshd_raft_"); ok {
		t.Errorf("w1 (a worker) has raft series: %s", k)
	}
	if k, _, ok := withPrefix(wm, "meshd_joins_served_total"); ok {
		t.Errorf("w1 (a worker) serves joins: %s", k)
	}
	if v, ok := wm[`meshd_admissions_total{code="ok"}`]; !ok || v != 0 {
		t.Errorf("w1: meshd_admissions_total{code=\"ok\"} = %v (present %t), want 0", v, ok)
	}

	// After a restart the counters start again, each at 0 and present.
	origin.Stop(t)
	origin.Start(t)
	restarted, err := scrape(t.Context(), origin, "127.0.0.1:9464")
	if err != nil {
		t.Fatal(err)
	}
	checkStartAtZero(t, "origin after a restart", restarted)
}

// checkStartAtZero checks that a control node that has served no join or
// admission since it started has the counters' series at 0: ok, pending
// and refusals for joins, ok and a refusal for admissions.
func checkStartAtZero(t *testing.T, node string, m map[string]float64) {
	t.Helper()
	for _, series := range []string{
		`meshd_joins_served_total{code="ok"}`,
		`meshd_joins_served_total{code="pending"}`,
		`meshd_joins_served_total{code="` + string(codes.TokenConsumed) + `"}`,
		`meshd_joins_served_total{code="` + string(codes.NoLeader) + `"}`,
		`meshd_admissions_total{code="ok"}`,
		`meshd_admissions_total{code="` + string(codes.NameTaken) + `"}`,
	} {
		if v, ok := m[series]; !ok || v != 0 {
			t.Errorf("%s: %s = %v (present %t), want 0", node, series, v, ok)
		}
	}
}
