package mesh

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"
)

// Log keys of this package.
const (
	keyOverlayIP = "overlay_ip"
	keyUDP       = "udp"
	keyCode      = "code"
	keyErr       = "err"
	keyLib       = "lib" // on Nebula's own lines: "nebula" (gossip and raft use the same key)
)

// maxCaptured bounds how many Nebula warnings and errors a reload keeps for
// its error message.
const maxCaptured = 5

// logBridge forwards one Nebula instance's logrus entries to slog, with
// lib=nebula and each logrus field as an attribute. Nebula
// errors and warnings arrive as slog errors and warnings, its info lines
// as slog debug, anything finer below that. A value that looks like PEM
// is replaced by "[redacted]".
//
// It also watches the stream for two things Nebula's Control API does not
// expose: the UDP address the listener actually bound (for port 0), and,
// while a reload runs, the warnings and errors Nebula logs instead of
// returning them.
type logBridge struct {
	log *slog.Logger

	mu        sync.Mutex
	udp       netip.AddrPort
	capturing bool
	captured  []string
}

// newNebulaLogger returns a fresh logrus.Logger for one Nebula instance
// (nebula.Main rewrites the level and formatter of the logger it gets, so
// instances must not share one) and its bridge to log.
func newNebulaLogger(log *slog.Logger) (*logrus.Logger, *logBridge) {
	l := logrus.New()
	l.SetOutput(io.Discard) // the hook is the only output
	l.SetLevel(logrus.InfoLevel)
	b := &logBridge{log: log}
	l.AddHook(b)
	return l, b
}

// Levels implements logrus.Hook.
func (b *logBridge) Levels() []logrus.Level { return logrus.AllLevels }

// Fire implements logrus.Hook.
func (b *logBridge) Fire(e *logrus.Entry) error {
	level := slogLevel(e)
	b.observe(e, level)
	ctx := context.Background()
	if !b.log.Enabled(ctx, level) {
		return nil
	}
	keys := make([]string, 0, len(e.Data))
	for k := range e.Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	attrs := make([]slog.Attr, 0, 1+len(keys))
	attrs = append(attrs, slog.String(keyLib, "nebula"))
	for _, k := range keys {
		attrs = append(attrs, slog.String(k, redact(e.Data[k])))
	}
	b.log.LogAttrs(ctx, level, redact(e.Message), attrs...)
	return nil
}

// observe records the bound UDP address and, during a reload, warnings
// and errors.
func (b *logBridge) observe(e *logrus.Entry, level slog.Level) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e.Message == "Nebula interface is active" {
		if a, ok := e.Data["udpAddr"].(netip.AddrPort); ok {
			b.udp = a
		}
	}
	if b.capturing && level >= slog.LevelWarn && len(b.captured) < maxCaptured {
		line := redact(e.Message)
		if err, ok := e.Data[logrus.ErrorKey]; ok {
			line += ": " + redact(err)
		}
		b.captured = append(b.captured, line)
	}
}

// capture starts collecting warnings and errors; the returned func stops
// and returns what was logged in between. Nebula logs from its own
// goroutines too, so a line may be unrelated to the reload: it is context
// for a failure that Verify found, never the reason for one.
func (b *logBridge) capture() func() []string {
	b.mu.Lock()
	b.capturing, b.captured = true, nil
	b.mu.Unlock()
	return func() []string {
		b.mu.Lock()
		defer b.mu.Unlock()
		out := b.captured
		b.capturing, b.captured = false, nil
		return out
	}
}

// udpAddr is the address Nebula's UDP listener bound, once it has said so.
func (b *logBridge) udpAddr() netip.AddrPort {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.udp
}

// slogLevel maps a logrus level onto slog. Two errors Nebula logs when the
// process lacks CAP_NET_ADMIN for the socket buffers are warnings here:
// the overlay works without them.
func slogLevel(e *logrus.Entry) slog.Level {
	switch e.Level {
	case logrus.PanicLevel, logrus.FatalLevel, logrus.ErrorLevel:
		switch e.Message {
		case "Failed to set listen.read_buffer", "Failed to set listen.write_buffer":
			return slog.LevelWarn
		}
		return slog.LevelError
	case logrus.WarnLevel:
		return slog.LevelWarn
	case logrus.InfoLevel:
		return slog.LevelDebug
	default:
		return slog.LevelDebug - 4
	}
}

// redact formats v and hides anything that looks like PEM or a key.
func redact(v any) string {
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case error:
		s = v.Error()
	default:
		s = fmt.Sprint(v)
	}
	if strings.Contains(s, "-----BEGIN") || strings.Contains(s, "PRIVATE KEY") {
		return "[redacted]"
	}
	return s
}
