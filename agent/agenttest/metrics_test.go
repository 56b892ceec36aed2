package agenttest_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
)

// TestMetrics: with metrics_addr set, /metrics serves Prometheus text that
// matches the cluster: this node running and leading raft, its nodes by
// role and state.
func TestMetrics(t *testing.T) {
	clock := &agenttest.Clock{}
	ip := agenttest.TakeIP(t)
	addr := net.JoinHostPort(ip, "9464")
	origin := agenttest.NewNodeAt(t, "origin", ip, clock, func(c *config.File) { c.MetricsAddr = addr })
	origin.Init(t, "alpha")
	w1 := agenttest.NewNode(t, "w1", clock)
	if _, err := w1.Join(t, origin.Admit(t, apitype.AdmitRequest{Name: "w1"})); err != nil {
		t.Fatal(err)
	}
	st, err := origin.Client.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`meshd_up{state="running"} 1`,
		`meshd_cluster_nodes{role="control",state="active"} 1`,
		`meshd_cluster_nodes{role="worker",state="active"} 1`,
		`meshd_raft_leader 1`,
		`meshd_raft_voters 1`,
		`meshd_gossip_key_errors_total 0`,
		`meshd_joins_served_total{code="ok"} 1`,
		`meshd_admissions_total{code="ok"} 1`,
		"\nmeshd_join_duration_seconds_count 1\n",
		"\nmeshd_raft_apply_duration_seconds_count ",
		"\nmeshd_raft_commit_index ",
		`meshd_build_info{commit="`,
		"\nmeshd_nebula_handshake_manager_initiated_total ",
		"\ngo_goroutines ",
		"\nprocess_open_fds ",
		"\nprocess_resident_memory_bytes ",
		fmt.Sprintf("meshd_tls_cert_expiry_timestamp_seconds %g", float64(st.TLSCertExpires.Unix())),
		fmt.Sprintf("meshd_nebula_cert_expiry_timestamp_seconds %g", float64(st.Overlay.CertExpires.Unix())),
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}
