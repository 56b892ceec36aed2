package raftnode

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strconv"

	"github.com/hashicorp/go-hclog"
)

// logKeyLib names the library that logged a line; gossip and mesh use the
// same key (serf, memberlist, nebula).
const logKeyLib = "lib"

// levelTrace is where hclog's Trace lands in slog: below Debug, so that
// log_level: debug does not show raft's per-RPC chatter.
const levelTrace = slog.LevelDebug - 4

// slogHCLog is an hclog.Logger that hands every record to a slog.Logger:
// the level maps to slog's (Trace below Debug), the arguments become slog
// attributes with their values, the hclog name becomes the "lib" attribute
// (raft, raft-net, raft-snapshot). The slog logger decides what is shown,
// so log_level and log_format apply to raft as to meshd's own lines, and a
// reload's new level applies at once (Is* ask the handler each time).
// SetLevel is ignored for the same reason.
type slogHCLog struct {
	log     *slog.Logger // without the lib attribute
	name    string
	implied []any // hclog.With arguments, as given
}

// newHCLog returns an hclog.Logger named name writing to log (nil
// discards).
func newHCLog(log *slog.Logger, name string) hclog.Logger {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &slogHCLog{log: log, name: name}
}

// slogLevel maps an hclog level onto slog.
func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return levelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default: // Info, NoLevel, and anything unknown
		return slog.LevelInfo
	}
}

func (l *slogHCLog) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	sl := slogLevel(level)
	ctx := context.Background()
	if !l.log.Enabled(ctx, sl) {
		return
	}
	attrs := make([]slog.Attr, 0, 1+(len(l.implied)+len(args))/2)
	attrs = append(attrs, slog.String(logKeyLib, l.name))
	attrs = appendArgs(attrs, l.implied)
	attrs = appendArgs(attrs, args)
	l.log.LogAttrs(ctx, sl, msg, attrs...)
}

// appendArgs turns hclog's alternating keys and values into attributes.
// A value hclog would format (Fmt, Hex, Octal, Binary, Quote) is formatted
// the same way; a key without a value gets hclog's EXTRA_VALUE_AT_END.
func appendArgs(attrs []slog.Attr, args []any) []slog.Attr {
	if len(args)%2 == 1 {
		args = append(args[:len(args)-1:len(args)-1], hclog.MissingKey, args[len(args)-1])
	}
	for i := 0; i+1 < len(args); i += 2 {
		key, ok := args[i].(string)
		if !ok {
			key = fmt.Sprint(args[i])
		}
		attrs = append(attrs, slog.Any(key, hclogValue(args[i+1])))
	}
	return attrs
}

// hclogValue renders hclog's formatting helpers; other values pass as they
// are (slog's handlers print errors by their message).
func hclogValue(v any) any {
	switch v := v.(type) {
	case hclog.Format:
		if len(v) == 0 {
			return ""
		}
		if f, ok := v[0].(string); ok {
			return fmt.Sprintf(f, v[1:]...)
		}
		return fmt.Sprint(v...)
	case hclog.Hex:
		return "0x" + strconv.FormatInt(int64(v), 16)
	case hclog.Octal:
		return "0" + strconv.FormatInt(int64(v), 8)
	case hclog.Binary:
		return "0b" + strconv.FormatInt(int64(v), 2)
	case hclog.Quote:
		return strconv.Quote(string(v))
	case fmt.Stringer:
		return fmt.Sprint(v) // recovers a panicking String, as hclog does not
	default:
		return v
	}
}

func (l *slogHCLog) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *slogHCLog) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *slogHCLog) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *slogHCLog) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *slogHCLog) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *slogHCLog) enabled(level hclog.Level) bool {
	return l.log.Enabled(context.Background(), slogLevel(level))
}

func (l *slogHCLog) IsTrace() bool { return l.enabled(hclog.Trace) }
func (l *slogHCLog) IsDebug() bool { return l.enabled(hclog.Debug) }
func (l *slogHCLog) IsInfo() bool  { return l.enabled(hclog.Info) }
func (l *slogHCLog) IsWarn() bool  { return l.enabled(hclog.Warn) }
func (l *slogHCLog) IsError() bool { return l.enabled(hclog.Error) }

func (l *slogHCLog) ImpliedArgs() []any { return l.implied }

func (l *slogHCLog) With(args ...any) hclog.Logger {
	c := *l
	c.implied = append(l.implied[:len(l.implied):len(l.implied)], args...)
	return &c
}

func (l *slogHCLog) Name() string { return l.name }

func (l *slogHCLog) Named(name string) hclog.Logger {
	c := *l
	if c.name != "" {
		c.name += "." + name
	} else {
		c.name = name
	}
	return &c
}

func (l *slogHCLog) ResetNamed(name string) hclog.Logger {
	c := *l
	c.name = name
	return &c
}

// SetLevel does nothing: log_level (through the slog handler) decides.
func (l *slogHCLog) SetLevel(hclog.Level) {}

// GetLevel is the finest level the slog handler shows now.
func (l *slogHCLog) GetLevel() hclog.Level {
	for _, lv := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if l.enabled(lv) {
			return lv
		}
	}
	return hclog.Off
}

func (l *slogHCLog) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(l.StandardWriter(opts), "", 0)
}

// StandardWriter logs each line written at opts.ForceLevel, Info without
// one. raft does not use it; it is here to complete the interface.
func (l *slogHCLog) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	level := hclog.Info
	if opts != nil && opts.ForceLevel != hclog.NoLevel {
		level = opts.ForceLevel
	}
	return stdWriter{l: l, level: level}
}

type stdWriter struct {
	l     *slogHCLog
	level hclog.Level
}

func (w stdWriter) Write(p []byte) (int, error) {
	for line := range bytes.SplitSeq(bytes.TrimRight(p, "\n"), []byte("\n")) {
		if len(line) > 0 {
			w.l.Log(w.level, string(line))
		}
	}
	return len(p), nil
}
