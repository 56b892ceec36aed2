package apitype_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

func TestNewError(t *testing.T) {
	tests := []struct {
		name       string
		code       codes.Code
		err        error
		wantDetail string
	}{
		{"ok/nil-err", codes.TokenConsumed, nil, ""},
		{"ok/err-is-the-cause", codes.TokenConsumed, errors.New(codes.TokenConsumed.Cause()), ""},
		{"ok/coded-nil-err", codes.NoLeader, codes.Wrap(codes.NoLeader, nil), ""},
		{"ok/detail", codes.TokenConsumed, errors.New("token 0123abcd consumed by w1"), "token 0123abcd consumed by w1"},
		{"ok/wrapped-detail", codes.RaftApply, fmt.Errorf("admit w1: %w", errors.New("timeout")), "admit w1: timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := apitype.NewError(tt.code, tt.err)
			if e.Code() != tt.code || e.ErrCode != tt.code {
				t.Errorf("code = %q (field %q), want %q", e.Code(), e.ErrCode, tt.code)
			}
			if e.Cause != tt.code.Cause() || e.Cause == "" {
				t.Errorf("cause = %q, want the table's %q", e.Cause, tt.code.Cause())
			}
			if e.Remedy != tt.code.Remedy() || e.Remedy == "" {
				t.Errorf("remedy = %q, want the table's %q", e.Remedy, tt.code.Remedy())
			}
			if e.Detail != tt.wantDetail {
				t.Errorf("detail = %q, want %q", e.Detail, tt.wantDetail)
			}
		})
	}
}

// The Error() format is part of what users see, so it is checked here even
// though callers must match on codes.
func TestErrorString(t *testing.T) {
	c := codes.TokenExpired
	tests := []struct {
		name string
		e    *apitype.Error
		want string
	}{
		{"ok/no-detail", apitype.NewError(c, nil), string(c) + ": " + c.Cause()},
		{"ok/detail", apitype.NewError(c, errors.New("expired 3m ago")), string(c) + ": " + c.Cause() + " (expired 3m ago)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.e.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCodesOf(t *testing.T) {
	e := apitype.NewError(codes.TokenConsumed, errors.New("used by w1"))
	tests := []struct {
		name string
		err  error
	}{
		{"ok/bare", e},
		{"ok/wrapped", fmt.Errorf("join: %w", e)},
		{"ok/decoded", func() error {
			b, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			var d apitype.Error
			if err := json.Unmarshal(b, &d); err != nil {
				t.Fatal(err)
			}
			return &d
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := codes.Of(tt.err); got != codes.TokenConsumed {
				t.Errorf("codes.Of = %q, want %q", got, codes.TokenConsumed)
			}
			if got, ok := errors.AsType[*apitype.Error](tt.err); !ok || got.Code() != codes.TokenConsumed {
				t.Errorf("errors.AsType[*apitype.Error] = %v, %v", got, ok)
			}
		})
	}
}

// jsonKeys marshals v and returns its top-level keys, sorted.
func jsonKeys(t *testing.T, v any) []string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// roundTrip marshals in and decodes it into a new value of the same type.
func roundTrip[T any](t *testing.T, in T) T {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("unmarshal %s: %v", b, err)
	}
	return out
}

func TestErrorJSON(t *testing.T) {
	tests := []struct {
		name     string
		e        *apitype.Error
		wantKeys []string
	}{
		{"ok/with-detail", apitype.NewError(codes.TokenConsumed, errors.New("used by w1")), []string{"cause", "code", "detail", "remedy"}},
		{"ok/detail-omitted", apitype.NewError(codes.TokenConsumed, nil), []string{"cause", "code", "remedy"}},
		{"ok/details-of-a-refused-config", apitype.NewError(codes.ConfigInvalid, linesError{"line 1: a", "line 2: b"}),
			[]string{"cause", "code", "detail", "details", "remedy"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := jsonKeys(t, tt.e); !slices.Equal(got, tt.wantKeys) {
				t.Errorf("keys = %v, want %v", got, tt.wantKeys)
			}
			if got := roundTrip(t, *tt.e); !reflect.DeepEqual(got, *tt.e) {
				t.Errorf("round trip = %+v, want %+v", got, *tt.e)
			}
		})
	}
}

// linesError is an error with several lines, as config.Errors is.
type linesError []string

func (l linesError) Error() string   { return strings.Join(l, "; ") }
func (l linesError) Lines() []string { return l }

func TestNodeJSON(t *testing.T) {
	// DESIGN §8: `nodes -o json` objects carry at least these keys.
	required := []string{"name", "role", "state", "gossip", "overlay_ip", "underlay_addr", "raft", "cert_expires", "version"}
	full := apitype.Node{
		Name: "w1", ID: "n-1", Role: "worker", State: "active", Gossip: "alive",
		OverlayIP: "10.42.0.2", Underlay: "192.0.2.7", Raft: "none",
		CertExpires: time.Date(2031, 2, 3, 4, 5, 6, 0, time.UTC), Version: "1.0.0",
	}
	tests := []struct {
		name string
		n    apitype.Node
	}{
		{"ok/full", full},
		{"ok/zero", apitype.Node{}}, // every required key is present even when empty
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys := jsonKeys(t, tt.n)
			for _, k := range required {
				if !slices.Contains(keys, k) {
					t.Errorf("key %q missing; have %v", k, keys)
				}
			}
			got := roundTrip(t, tt.n)
			if !got.CertExpires.Equal(tt.n.CertExpires) {
				t.Errorf("cert_expires = %v, want %v", got.CertExpires, tt.n.CertExpires)
			}
			got.CertExpires = tt.n.CertExpires
			if !reflect.DeepEqual(got, tt.n) {
				t.Errorf("round trip = %+v, want %+v", got, tt.n)
			}
		})
	}
	var m map[string]any
	b, _ := json.Marshal(full)
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["name"] != "w1" || m["overlay_ip"] != "10.42.0.2" || m["underlay_addr"] != "192.0.2.7" || m["cert_expires"] != "2031-02-03T04:05:06Z" {
		t.Errorf("field values under the wrong keys: %s", b)
	}
}

func TestStatusJSON(t *testing.T) {
	tests := []struct {
		name     string
		s        apitype.Status
		wantKeys []string
	}{
		{"ok/starting", apitype.Status{State: "starting", Version: "1.0.0"}, []string{"state", "version"}},
		{"ok/running", apitype.Status{
			State: "running", Version: "1.0.0", Cluster: "prod", ClusterID: "c-1", Node: "n1", NodeID: "n-1",
			Role: "control", CAHolder: true, OverlayIP: "10.42.0.1", Underlay: "192.0.2.1", Raft: "leader",
			Leader: "n1", CertExpires: time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC),
			Warnings: []apitype.Warning{{Code: codes.ClockSkew, Detail: "3s ahead of the leader"}},
		}, []string{"ca_holder", "cert_expires", "cluster", "cluster_id", "leader", "node", "node_id",
			"overlay_ip", "raft", "role", "state", "underlay_addr", "version", "warnings"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := jsonKeys(t, tt.s); !slices.Equal(got, tt.wantKeys) {
				t.Errorf("keys = %v, want %v", got, tt.wantKeys)
			}
			if got := roundTrip(t, tt.s); !reflect.DeepEqual(got, tt.s) {
				t.Errorf("round trip = %+v, want %+v", got, tt.s)
			}
		})
	}
}

func TestJoinLineErrorJSON(t *testing.T) {
	in := apitype.JoinLine{Error: apitype.NewError(codes.CAMismatch, errors.New("pin abc, got def"))}
	got := roundTrip(t, in)
	if got.Error == nil || codes.Of(got.Error) != codes.CAMismatch || !reflect.DeepEqual(*got.Error, *in.Error) {
		t.Fatalf("error line round trip = %+v, want %+v", got.Error, in.Error)
	}
	if got.Result != nil || got.Step != "" || got.Warning != nil {
		t.Fatalf("error line grew other fields: %+v", got)
	}
}

// TestNATBehind: a node is behind a NAT when the address its join came
// from is another IP than the one it advertised; unknown is not behind.
func TestNATBehind(t *testing.T) {
	for _, tc := range []struct {
		underlay, seen string
		want           bool
	}{
		{"192.168.1.10", "203.0.113.1", true},
		{"192.0.2.7", "192.0.2.7", false},
		{"192.0.2.7", "::ffff:192.0.2.7", false},
		{"192.0.2.7", "", false},
		{"", "203.0.113.1", false},
		{"not-an-ip", "203.0.113.1", false},
	} {
		if got := apitype.NATBehind(tc.underlay, tc.seen); got != tc.want {
			t.Errorf("NATBehind(%q, %q) = %v, want %v", tc.underlay, tc.seen, got, tc.want)
		}
	}
}
