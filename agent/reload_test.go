package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/agent/localapi"
	"github.com/meshd/meshd/codes"
)

// reloadAgent is an agent past its start (phase unjoined) whose config file
// reads as next (or fails with readErr), recording what it tells systemd.
func reloadAgent(t *testing.T, next *config.File, readErr error) (*Agent, *slog.LevelVar, *[]string) {
	t.Helper()
	lv := new(slog.LevelVar)
	var notes []string
	a, err := New(config.Default(), Deps{
		LevelVar: lv,
		Notify:   func(s string) { notes = append(notes, s) },
		ReadConfig: func() (config.File, error) {
			if readErr != nil {
				return config.File{}, readErr
			}
			return *next, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	a.setPhase(phaseUnjoined, nil)
	return a, lv, &notes
}

func TestReload(t *testing.T) {
	tests := []struct {
		name     string
		next     config.File
		readErr  error
		level    slog.Level // the LevelVar afterwards
		restart  []string   // fields named in the RestartNeeded warning
		wantCode codes.Code // "" : success
	}{
		{name: "ok/unchanged", next: config.Default(), level: slog.LevelInfo},
		{name: "ok/log-level", next: withCfg(func(c *config.File) { c.LogLevel = "debug" }), level: slog.LevelDebug},
		{name: "ok/restart-needed", next: withCfg(func(c *config.File) { c.Ports.Gossip = 8000; c.NodeName = "x" }),
			level: slog.LevelInfo, restart: []string{"node_name", "ports.gossip"}},
		{name: "ok/both", next: withCfg(func(c *config.File) { c.LogLevel = "warn"; c.LogFormat = "json" }),
			level: slog.LevelWarn, restart: []string{"log_format"}},
		{name: "fail/invalid-value", next: withCfg(func(c *config.File) { c.LogLevel = "loud" }),
			level: slog.LevelInfo, wantCode: codes.ReloadRefused},
		{name: "fail/unreadable", readErr: codes.Wrap(codes.ConfigInvalid, errors.New("field bogus not found")),
			level: slog.LevelInfo, wantCode: codes.ReloadRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, lv, notes := reloadAgent(t, &tt.next, tt.readErr)
			ws, err := a.Reload()
			if codes.Of(err) != tt.wantCode {
				t.Fatalf("Reload() error %v, want code %q", err, tt.wantCode)
			}
			if lv.Level() != tt.level {
				t.Errorf("level %v, want %v", lv.Level(), tt.level)
			}
			var restart []string
			for _, w := range ws {
				if w.Code != codes.RestartNeeded {
					t.Errorf("warning %v, want only %s", w, codes.RestartNeeded)
				}
				_, list, _ := strings.Cut(w.Detail, ": ")
				restart = append(restart, strings.Split(list, ", ")...)
			}
			if !slices.Equal(restart, tt.restart) {
				t.Errorf("restart needed for %q, want %q", restart, tt.restart)
			}
			if want := []string{"RELOADING", "READY"}; !slices.Equal(*notes, want) {
				t.Errorf("told systemd %q, want %q", *notes, want)
			}
		})
	}
}

// A second reload back to the old level applies it: log_level is compared
// with the level in force, not with the config meshd started with.
func TestReloadBackToStartLevel(t *testing.T) {
	next := withCfg(func(c *config.File) { c.LogLevel = "error" })
	a, lv, _ := reloadAgent(t, &next, nil)
	if _, err := a.Reload(); err != nil || lv.Level() != slog.LevelError {
		t.Fatalf("first reload: %v, level %v", err, lv.Level())
	}
	next = config.Default()
	if _, err := a.Reload(); err != nil || lv.Level() != slog.LevelInfo {
		t.Fatalf("second reload: %v, level %v", err, lv.Level())
	}
}

func TestReloadWithoutConfigOrLevelVar(t *testing.T) {
	a, err := New(config.Default(), Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Reload(); codes.Of(err) != codes.ConfigInvalid {
		t.Fatalf("Reload() without ReadConfig: %v, want %s", err, codes.ConfigInvalid)
	}
	// Without a LevelVar a log_level change needs a restart.
	next := withCfg(func(c *config.File) { c.LogLevel = "debug" })
	a, err = New(config.Default(), Deps{ReadConfig: func() (config.File, error) { return next, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := a.Reload()
	if err != nil || len(ws) != 1 || !strings.Contains(ws[0].Detail, "log_level") {
		t.Fatalf("Reload() = %v, %v; want a restart-needed warning for log_level", ws, err)
	}
}

// Before meshd has sent READY, a reload must not tell systemd anything.
func TestReloadWhileStartingDoesNotNotify(t *testing.T) {
	next := config.Default()
	a, _, notes := reloadAgent(t, &next, nil)
	a.setPhase(phaseStarting, nil)
	if _, err := a.Reload(); err != nil {
		t.Fatal(err)
	}
	if len(*notes) != 0 {
		t.Fatalf("told systemd %q while starting", *notes)
	}
}

func TestHandleReload(t *testing.T) {
	next := withCfg(func(c *config.File) { c.BindAddr = "127.0.0.1" })
	a, _, _ := reloadAgent(t, &next, nil)
	rec := httptest.NewRecorder()
	localapi.Do(a.log, "", api{a}.postReload)(rec, httptest.NewRequest(http.MethodPost, apitype.PathReload, strings.NewReader("{}")))
	var ws []apitype.Warning
	if err := json.Unmarshal(rec.Body.Bytes(), &ws); rec.Code != http.StatusOK || err != nil {
		t.Fatalf("status %d, body %s (%v)", rec.Code, rec.Body, err)
	}
	if len(ws) != 1 || ws[0].Code != codes.RestartNeeded || !strings.Contains(ws[0].Detail, "bind_addr") {
		t.Fatalf("warnings %+v, want one %s naming bind_addr", ws, codes.RestartNeeded)
	}

	next = withCfg(func(c *config.File) { c.OverlayCIDR = "nope" })
	rec = httptest.NewRecorder()
	localapi.Do(a.log, "", api{a}.postReload)(rec, httptest.NewRequest(http.MethodPost, apitype.PathReload, nil))
	var e apitype.Error
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.ErrCode != codes.ReloadRefused ||
		rec.Code != codes.ReloadRefused.Status() || !strings.Contains(e.Detail, "overlay_cidr") {
		t.Fatalf("status %d, body %s; want %s naming overlay_cidr", rec.Code, rec.Body, codes.ReloadRefused)
	}
}

func TestChangedFields(t *testing.T) {
	b := withCfg(func(c *config.File) {
		c.Raft.LeaderLease /= 2
		c.Ports.Raft = 1
		c.StateDir = "/srv/meshd"
	})
	got := config.ChangedFields(config.Default(), b)
	want := []string{"state_dir", "ports.raft", "raft.leader_lease"}
	if !slices.Equal(got, want) {
		t.Fatalf("changedFields = %q, want %q", got, want)
	}
}

func TestReloadableLogger(t *testing.T) {
	var buf bytes.Buffer
	log, lv := withCfg(func(c *config.File) { c.LogLevel = "warn" }).NewReloadableLogger(&buf, false)
	log = log.With("component", "x").WithGroup("g")
	log.Info("hidden")
	lv.Set(slog.LevelDebug)
	log.Debug("shown", "k", 1)
	out := buf.String()
	if strings.Contains(out, "hidden") || !strings.Contains(out, "msg=shown component=x g.k=1") {
		t.Fatalf("log output %q: want only the debug line, with its attrs", out)
	}
}

// A reload of an invalid file is refused with ReloadRefused (meshd keeps
// running, and says so), every problem in the answer's details.
func TestReloadRefusalListsEveryProblem(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meshd.yaml")
	if err := os.WriteFile(path, []byte("log_level: loud\ntimers: slow\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := New(config.Default(), Deps{ReadConfig: func() (config.File, error) { return config.Check(path, true, nil) }})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	localapi.Do(a.log, "", api{a}.postReload)(rec, httptest.NewRequest(http.MethodPost, apitype.PathReload, nil))
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

// withCfg is the default config changed by f.
func withCfg(f func(c *config.File)) config.File {
	c := config.Default()
	f(&c)
	return c
}
