package config

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/meshd/meshd/codes"
)

// The problems of a file come back all at once, each with its line, field
// and value; cmd/meshd's golden files check the printed form.
func TestCheckConfigProblems(t *testing.T) {
	body := "log_level: warning\nlog_levle: debug\nraft:\n  heartbeat_timeout: 1\nports:\n  gossip: 0\n"
	_, err := Check(writeCfgFile(t, body), true, nil)
	if codes.Of(err) != codes.ConfigInvalid {
		t.Fatalf("code of %v = %q, want %s", err, codes.Of(err), codes.ConfigInvalid)
	}
	ce, ok := errors.AsType[*Errors](err)
	if !ok {
		t.Fatalf("%v carries no *Errors", err)
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
	_, err := Check(writeCfgFile(t, "socket: "+long+"\nports:\n  gossip: x\n"), true, nil)
	ce, ok := errors.AsType[*Errors](err)
	if !ok {
		t.Fatalf("%v carries no *Errors", err)
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
	cfg, err := Check(writeCfgFile(t, "raft:\n  heartbeat_timeout: 500ms\n  leader_lease: 250ms\nlog_level: debug\n"), true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Raft.HeartbeatTimeout.String() != "500ms" || cfg.LogLevel != "debug" || cfg.Ports != Default().Ports {
		t.Fatalf("config %+v: the file's values over the defaults", cfg)
	}
}

func TestSuggestKey(t *testing.T) {
	top := yamlKeys(reflect.TypeFor[File]())
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
