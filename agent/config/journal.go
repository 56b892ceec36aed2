package config

import (
	"context"
	"io"
	"log/slog"
	"sync"
)

// Syslog priorities (sd-daemon(3)) by slog level. meshd has no notice,
// critical, alert or emergency lines.
const (
	prioErr     = "<3>"
	prioWarning = "<4>"
	prioInfo    = "<6>"
	prioDebug   = "<7>"
)

// journalPriority is the sd-daemon(3) prefix for a record at level l.
func journalPriority(l slog.Level) string {
	switch {
	case l >= slog.LevelError:
		return prioErr
	case l >= slog.LevelWarn:
		return prioWarning
	case l >= slog.LevelInfo:
		return prioInfo
	default:
		return prioDebug
	}
}

// NewDaemonLogger is meshd's logger on its stderr: NewReloadableLogger,
// and when journal is set (stderr is connected to journald, see
// journal.StderrIsJournalStream) no timestamps (journald adds its own) and
// each line prefixed with its syslog priority, "<4>level=WARN ...", which
// journald strips and records as PRIORITY (SyslogLevelPrefix=yes, the
// default), so `journalctl -p warning` filters meshd's lines. The rest of
// the line is the configured log_format, text or json, unchanged.
func (c File) NewDaemonLogger(w io.Writer, journal bool) (*slog.Logger, *slog.LevelVar) {
	if !journal {
		return c.NewReloadableLogger(w, true)
	}
	lv := new(slog.LevelVar)
	lvl, _ := ParseLevel(c.LogLevel)
	lv.Set(lvl)
	pw := &priorityWriter{w: w}
	h := priorityHandler{mu: new(sync.Mutex), pw: pw, h: c.NewLogger(pw, false).Handler()}
	return slog.New(levelFilter{h: h, lv: lv}), lv
}

// priorityHandler sets pw's prefix to each record's priority before h
// formats it into pw. slog's built-in handlers write each record with one
// Write call; mu (shared by every handler derived with WithAttrs or
// WithGroup, as pw is) keeps another record's prefix from slipping in
// between.
type priorityHandler struct {
	mu *sync.Mutex
	pw *priorityWriter
	h  slog.Handler
}

func (p priorityHandler) Enabled(ctx context.Context, l slog.Level) bool { return p.h.Enabled(ctx, l) }

func (p priorityHandler) Handle(ctx context.Context, r slog.Record) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pw.prefix = journalPriority(r.Level)
	return p.h.Handle(ctx, r)
}

func (p priorityHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return priorityHandler{mu: p.mu, pw: p.pw, h: p.h.WithAttrs(as)}
}

func (p priorityHandler) WithGroup(name string) slog.Handler {
	return priorityHandler{mu: p.mu, pw: p.pw, h: p.h.WithGroup(name)}
}

// priorityWriter writes prefix and a formatted record to w in one Write,
// so that journald reads them as one line. Only priorityHandler.Handle
// writes to it, under its mutex.
type priorityWriter struct {
	w      io.Writer
	prefix string
	buf    []byte
}

func (p *priorityWriter) Write(b []byte) (int, error) {
	p.buf = append(append(p.buf[:0], p.prefix...), b...)
	if _, err := p.w.Write(p.buf); err != nil {
		return 0, err
	}
	return len(b), nil
}
