package agent

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/codes"
)

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
		var ce *config.Error
		if errors.As(err, &ce) {
			attrs = append(attrs, "field", ce.Field)
		}
		a.log.Error("config reload refused; the running config stays", attrs...)
		return nil, err
	}

	var applied, restart []string
	for _, f := range config.ChangedFields(a.cfg, next) {
		if !slices.Contains(config.ReloadableFields, f) {
			restart = append(restart, f)
		}
	}
	// log_level: compared with the level in force, not the startup config,
	// so that a second reload back to the old level is applied too.
	lvl, _ := config.ParseLevel(next.LogLevel)
	switch {
	case a.d.LevelVar == nil && next.LogLevel != a.cfg.LogLevel:
		restart = append(restart, "log_level")
	case a.d.LevelVar != nil && a.d.LevelVar.Level() != lvl:
		a.d.LevelVar.Set(lvl)
		applied = append(applied, "log_level")
	}

	overlay, ws := a.reloadOverlay(next) // firewall and overlay_mtu (firewall.go)
	applied = append(applied, overlay...)
	if ids, w := a.reloadIdentities(); ids {
		applied = append(applied, "jwt.issuers[].jwks_file")
	} else if w != nil {
		ws = append(ws, *w)
	}
	if len(restart) > 0 {
		ws = append(ws, apitype.Warning{Code: codes.RestartNeeded,
			Detail: "changed, not applied until restart: " + strings.Join(restart, ", ")})
		a.log.Warn("config reloaded; some changes need a restart", "code", codes.RestartNeeded,
			"restart_needed", strings.Join(restart, ","))
	}
	a.log.Info("config reloaded", "applied", strings.Join(applied, ","), "log_level", next.LogLevel)
	return ws, nil
}

// reloadIdentities re-reads the JWKS files of the JWT issuers a control
// node trusts (a key rotation). ok is false when there are none or the
// files could not be read; w then says why, and the keys in force stay.
func (a *Agent) reloadIdentities() (ok bool, w *apitype.Warning) {
	a.mu.Lock()
	rt := a.rt
	a.mu.Unlock()
	if rt == nil {
		return false, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ok, err := rt.ReloadIdentities(ctx)
	if err != nil {
		a.log.Error("the JWT issuers' keys could not be reloaded; the keys in force stay", "code", codes.ConfigInvalid, "err", err)
		return false, &apitype.Warning{Code: codes.ConfigInvalid, Detail: "jwt.issuers: " + err.Error()}
	}
	return ok, nil
}
