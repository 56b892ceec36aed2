package enroll_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki/pkitest"
)

// TestServeHTTPObserves: every join request served at Path reports its
// outcome once (ok, or the refusal's code), and nothing else does: not
// the time or check endpoints, not a request turned away before it names
// a path this server serves.
func TestServeHTTPObserves(t *testing.T) {
	c := newCluster(t)
	var got []string
	c.deps.Observe = func(outcome string, elapsed time.Duration) {
		if elapsed < 0 {
			t.Errorf("outcome %s took %s", outcome, elapsed)
		}
		got = append(got, outcome)
	}
	srv := c.server()
	good, _ := c.request(t, "w1")
	goodBody, err := json.Marshal(good)
	if err != nil {
		t.Fatal(err)
	}
	serve := func(method, path string, body []byte) int {
		r := httptest.NewRequestWithContext(t.Context(), method, path, bytes.NewReader(body))
		r.RemoteAddr = "127.0.0.1:40000"
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		return w.Code
	}
	if code := serve(http.MethodPost, enroll.Path, goodBody); code != http.StatusOK {
		t.Fatalf("first join: status %d", code)
	}
	c.rec.ConsumedAt, c.rec.ConsumedBy = pkitest.Now, "someone-else"
	serve(http.MethodPost, enroll.Path, goodBody)
	serve(http.MethodPost, enroll.Path, []byte("{"))
	serve(http.MethodGet, enroll.TimePath, nil)
	serve(http.MethodPost, enroll.CheckPath, goodBody)
	serve(http.MethodGet, enroll.Path, nil)
	serve(http.MethodPost, "/v1/other", goodBody)
	want := []string{enroll.OutcomeOK, codes.TokenConsumed.String(), codes.EnrollRejected.String()}
	if !slices.Equal(got, want) {
		t.Fatalf("observed %q, want %q", got, want)
	}
}
