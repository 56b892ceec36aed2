package config

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"strings"
)

// Reloadable is the part of File that a running meshd applies on
// SIGHUP or POST /v0/reload. Its fields are duplicated on purpose (as raft's
// Reloadable is): a field becomes reloadable only by being added here,
// to ReloadableFields and to Reload. Any other change is reported with
// codes.RestartNeeded and waits for the next start.
type Reloadable struct {
	LogLevel string
}

// ReloadableFields are the yaml names of Reloadable's fields.
var ReloadableFields = append([]string{"log_level"}, ReloadableOverlay...)

// Reloadable returns the reloadable subset of c.
func (c File) Reloadable() Reloadable {
	return Reloadable{LogLevel: c.LogLevel}
}

// ChangedFields lists, by yaml name ("ports.gossip"), the leaf fields whose
// values differ between a and b.
func ChangedFields(a, b File) []string {
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
func (c File) NewReloadableLogger(w io.Writer, withTime bool) (*slog.Logger, *slog.LevelVar) {
	lv := new(slog.LevelVar)
	lvl, _ := ParseLevel(c.LogLevel)
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
