package agent

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// ReloadableConfig is the part of FileConfig that a running meshd applies on
// SIGHUP or POST /v0/reload. Its fields are duplicated on purpose (as raft's
// ReloadableConfig is): a field becomes reloadable only by being added here,
// to reloadableFields and to Reload. Any other change is reported with
// codes.RestartNeeded and waits for the next start.
type ReloadableConfig struct {
	LogLevel string
}

// reloadableFields are the yaml names of ReloadableConfig's fields.
var reloadableFields = append([]string{"log_level"}, reloadableOverlay...)

// Reloadable returns the reloadable subset of c.
func (c FileConfig) Reloadable() ReloadableConfig {
	return ReloadableConfig{LogLevel: c.LogLevel}
}

// Reload re-reads the config file meshd was started with (Deps.ReadConfig),
// validates it and applies the reloadable subset. On any error the running
// config stays as it is and the coded error is returned. Changes to other
// fields come back as a codes.RestartNeeded warning naming them. systemd is
// told RELOADING before and READY after, once meshd has started.
func (a *Agent) Reload() ([]apitype.Warning, error) {
	if a.currentPhase() != phaseStarting {
		a.d.Notify("RELOADING")
		defer a.d.Notify("READY")
	}
	if a.d.ReadConfig == nil {
		return nil, codes.Wrap(codes.ConfigInvalid, errors.New("this meshd has no config file to reload"))
	}
	next, err := a.d.ReadConfig()
	if err == nil {
		err = next.Validate()
	}
	if err != nil {
		if codes.Of(err) == codes.ConfigInvalid {
			err = codes.Wrap(codes.ReloadRefused, err) // meshd is running: say so (configcheck.go)
		}
		attrs := []any{"code", codes.OrInternal(err), "err", err}
		var ce *ConfigError
		if errors.As(err, &ce) {
			attrs = append(attrs, "field", ce.Field)
		}
		a.log.Error("config reload refused; the running config stays", attrs...)
		return nil, err
	}

	var applied, restart []string
	for _, f := range changedFields(a.cfg, next) {
		if !slices.Contains(reloadableFields, f) {
			restart = append(restart, f)
		}
	}
	// log_level: compared with the level in force, not the startup config,
	// so that a second reload back to the old level is applied too.
	lvl, _ := parseLevel(next.LogLevel)
	switch {
	case a.d.LevelVar == nil && next.LogLevel != a.cfg.LogLevel:
		restart = append(restart, "log_level")
	case a.d.LevelVar != nil && a.d.LevelVar.Level() != lvl:
		a.d.LevelVar.Set(lvl)
		applied = append(applied, "log_level")
	}

	overlay, ws := a.reloadOverlay(next) // firewall and overlay_mtu (firewall.go)
	applied = append(applied, overlay...)
	if len(restart) > 0 {
		ws = append(ws, apitype.Warning{Code: codes.RestartNeeded,
			Detail: "changed, not applied until restart: " + strings.Join(restart, ", ")})
		a.log.Warn("config reloaded; some changes need a restart", "code", codes.RestartNeeded,
			"restart_needed", strings.Join(restart, ","))
	}
	a.log.Info("config reloaded", "applied", strings.Join(applied, ","), "log_level", next.LogLevel)
	return ws, nil
}

// handleReload is POST /v0/reload: the warnings as a JSON array, or the
// coded error of a config that was refused.
func (a *Agent) handleReload(w http.ResponseWriter, _ *http.Request) {
	ws, err := a.Reload()
	if err != nil {
		apitype.WriteError(w, err)
		return
	}
	if ws == nil {
		ws = []apitype.Warning{}
	}
	apitype.WriteJSON(w, http.StatusOK, ws)
}

// changedFields lists, by yaml name ("ports.gossip"), the leaf fields whose
// values differ between a and b.
func changedFields(a, b FileConfig) []string {
	var out []string
	var walk func(prefix string, x, y reflect.Value)
	walk = func(prefix string, x, y reflect.Value) {
		t := x.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				name = strings.ToLower(f.Name)
			}
			name = prefix + name
			xf, yf := x.Field(i), y.Field(i)
			if f.Type.Kind() == reflect.Struct {
				walk(name+".", xf, yf)
				continue
			}
			if !reflect.DeepEqual(xf.Interface(), yf.Interface()) {
				out = append(out, name)
			}
		}
	}
	walk("", reflect.ValueOf(a), reflect.ValueOf(b))
	return out
}

// NewReloadableLogger is NewLogger with a level that Reload can change: it
// returns the logger and the LevelVar to pass as Deps.LevelVar.
func (c FileConfig) NewReloadableLogger(w io.Writer, withTime bool) (*slog.Logger, *slog.LevelVar) {
	lv := new(slog.LevelVar)
	lvl, _ := parseLevel(c.LogLevel)
	lv.Set(lvl)
	return slog.New(levelFilter{h: c.NewLogger(w, withTime).Handler(), lv: lv}), lv
}

// levelFilter decides by lv which records reach h. slog's built-in handlers
// check their own level only in Enabled, so h's fixed level is bypassed.
type levelFilter struct {
	h  slog.Handler
	lv *slog.LevelVar
}

func (f levelFilter) Enabled(_ context.Context, l slog.Level) bool { return l >= f.lv.Level() }

func (f levelFilter) Handle(ctx context.Context, r slog.Record) error { return f.h.Handle(ctx, r) }

func (f levelFilter) WithAttrs(as []slog.Attr) slog.Handler {
	return levelFilter{h: f.h.WithAttrs(as), lv: f.lv}
}

func (f levelFilter) WithGroup(name string) slog.Handler {
	return levelFilter{h: f.h.WithGroup(name), lv: f.lv}
}
