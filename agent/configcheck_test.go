package agent

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// The problems of a file come back all at once, each with its line, field
// and value; cmd/meshd's golden files check the printed form.
func TestCheckConfigProblems(t *testing.T) {
	body := "log_level: warning\nlog_levle: debug\nraft:\n  heartbeat_timeout: 1\nports:\n  gossip: 0\n"
	_, err := CheckConfig(writeCfgFile(t, body), true, nil)
	if codes.Of(err) != codes.ConfigInvalid {
		t.Fatalf("code of %v = %q, want %s", err, codes.Of(err), codes.ConfigInvalid)
	}
	ce, ok := errors.AsType[*ConfigErrors](err)
	if !ok {
		t.Fatalf("%v carries no *ConfigErrors", err)
	}
	type prob struct {
		line         int
		field, value string
		hint         string
	}
	var got []prob
	for _, p := range ce.Problems {
		got = append(got, prob{p.Line, p.Field, p.Value, p.Hint})
	}
	want := []prob{{1, "log_level", "warning", ""}, {2, "log_levle", "", "log_level"},
		{4, "raft.heartbeat_timeout", "1", ""}, {6, "ports.gossip", "0", ""}}
	if !slices.Equal(got, want) {
		t.Fatalf("problems %+v, want %+v", got, want)
	}
}

// Two problems of one value are both reported; a value refused at decode
// is not checked again (it holds the default).
func TestCheckConfigSameFieldTwice(t *testing.T) {
	long := "rel/" + strings.Repeat("s", 120)
	_, err := CheckConfig(writeCfgFile(t, "socket: "+long+"\nports:\n  gossip: x\n"), true, nil)
	ce, ok := errors.AsType[*ConfigErrors](err)
	if !ok {
		t.Fatalf("%v carries no *ConfigErrors", err)
	}
	var fields []string
	for _, p := range ce.Problems {
		fields = append(fields, p.Field)
	}
	if want := []string{"socket", "socket", "ports.gossip"}; !slices.Equal(fields, want) {
		t.Fatalf("problems of %q, want %q:\n%v", fields, want, err)
	}
}

func TestCheckConfigValid(t *testing.T) {
	cfg, err := CheckConfig(writeCfgFile(t, "raft:\n  heartbeat_timeout: 500ms\n  leader_lease: 250ms\nlog_level: debug\n"), true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Raft.HeartbeatTimeout.String() != "500ms" || cfg.LogLevel != "debug" || cfg.Ports != DefaultFileConfig().Ports {
		t.Fatalf("config %+v: the file's values over the defaults", cfg)
	}
}

func TestSuggestKey(t *testing.T) {
	top := yamlKeys(reflect.TypeFor[FileConfig]())
	tests := []struct{ key, prefix, want string }{
		{"log_levle", "", "log_level"},                      // a swap
		{"LOG_LEVEL", "", "log_level"},                      // case
		{"stat_dir", "", "state_dir"},                       // a letter missing
		{"heartbeat_timeout", "", "raft.heartbeat_timeout"}, // at the wrong level
		{"gosip", "ports.", "ports.gossip"},
		{"bananas", "", ""}, // nothing near
	}
	for _, tt := range tests {
		keys := top
		if tt.prefix == "ports." {
			keys = []string{"gossip", "control", "raft", "nebula"}
		}
		if got := suggestKey(tt.key, tt.prefix, keys); got != tt.want {
			t.Errorf("suggestKey(%q) = %q, want %q", tt.key, got, tt.want)
		}
	}
}

// A reload of an invalid file is refused with ReloadRefused (meshd keeps
// running, and says so), every problem in the answer's details.
func TestReloadRefusalListsEveryProblem(t *testing.T) {
	path := writeCfgFile(t, "log_level: loud\ntimers: slow\n")
	a, err := New(DefaultFileConfig(), Deps{ReadConfig: func() (FileConfig, error) { return CheckConfig(path, true, nil) }})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	a.handleReload(rec, httptest.NewRequest(http.MethodPost, apitype.PathReload, nil))
	var e apitype.Error
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.ErrCode != codes.ReloadRefused {
		t.Fatalf("answer %s (%v), want %s", rec.Body, err, codes.ReloadRefused)
	}
	if !strings.Contains(e.Cause, "keeps running") || strings.Contains(e.Remedy+e.Cause, "did not start") {
		t.Fatalf("cause %q, remedy %q: must say meshd keeps running", e.Cause, e.Remedy)
	}
	want := []string{path + ": 2 problems", `line 1: log_level = "loud": must be debug, info, warn or error`,
		`line 2: timers = "slow": must be lan or fast`}
	if !slices.Equal(e.Details, want) {
		t.Fatalf("details %q, want %q", e.Details, want)
	}
}
