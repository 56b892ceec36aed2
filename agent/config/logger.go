package config

import (
	"io"
	"log/slog"
)

func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(s))
	return l, err
}

// NewLogger builds meshd's structured logger from the config.
func (c File) NewLogger(w io.Writer, withTime bool) *slog.Logger {
	lvl, _ := ParseLevel(c.LogLevel)
	opts := &slog.HandlerOptions{Level: lvl}
	if !withTime {
		opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}
	}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
