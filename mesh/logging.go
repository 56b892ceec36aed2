package mesh

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
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

// logBridge forwards one Nebula instance's log records to slog, with
// lib=nebula and each of Nebula's attributes as a string attribute (a
// group's keys joined with dots). Nebula errors and warnings arrive as
// slog errors and warnings, its info lines as slog debug; its debug and
// trace lines are not produced (Nebula logs at info, as the rendered
// logging.level says: since v1.11 nebula.Main no longer applies that key
// to the logger it is given, so the bridge's handler does). A value that
// looks like PEM is replaced by "[redacted]".
//
// It also watches the stream for what Nebula's Control API does not
// expose: the UDP address the listener actually bound (for port 0), the
// offloads it got (offload.go), and, while a reload runs, the warnings
// and errors Nebula logs instead of returning them.
type logBridge struct {
	log *slog.Logger

	mu        sync.Mutex
	udp       netip.AddrPort
	capturing bool
	captured  []string
	offload   offloadSeen // offload.go
}

// newNebulaLogger returns a fresh *slog.Logger for one Nebula instance
// (the bridge's state is per instance, so instances must not share one)
// and its bridge to log.
func newNebulaLogger(log *slog.Logger) (*slog.Logger, *logBridge) {
	b := &logBridge{log: log}
	return slog.New(&nebulaHandler{b: b}), b
}

// nebulaLevel is the finest level Nebula's records are produced at.
const nebulaLevel = slog.LevelInfo

// nebulaHandler is the slog.Handler of the logger Nebula gets: it hands
// every record to its bridge, with the attributes Nebula added through
// With (HostInfo.logger and the like) and the open groups.
type nebulaHandler struct {
	b      *logBridge
	attrs  []slog.Attr // from WithAttrs, keys already prefixed
	prefix string      // open groups, "a.b."
}

// Enabled implements slog.Handler. Info and above are always produced,
// whatever meshd's level: the bridge watches info lines (the bound UDP
// address) and, during a reload, warnings and errors.
func (h *nebulaHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= nebulaLevel
}

// WithAttrs implements slog.Handler.
func (h *nebulaHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	n := *h
	n.attrs = slices.Clip(h.attrs)
	for _, a := range attrs {
		n.attrs = appendFlat(n.attrs, h.prefix, a)
	}
	return &n
}

// WithGroup implements slog.Handler.
func (h *nebulaHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	n := *h
	n.prefix = h.prefix + name + "."
	return &n
}

// Handle implements slog.Handler.
func (h *nebulaHandler) Handle(ctx context.Context, r slog.Record) error {
	attrs := make([]slog.Attr, 0, 1+len(h.attrs)+r.NumAttrs())
	attrs = append(attrs, slog.String(keyLib, "nebula"))
	attrs = append(attrs, h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		attrs = appendFlat(attrs, h.prefix, a)
		return true
	})
	level := slogLevel(r.Level, r.Message)
	h.b.observe(r.Message, attrs[1:], level)
	if !h.b.log.Enabled(ctx, level) {
		return nil
	}
	for i := 1; i < len(attrs); i++ {
		attrs[i] = slog.String(attrs[i].Key, redact(attrs[i].Value.Any()))
	}
	h.b.log.LogAttrs(ctx, level, redact(r.Message), attrs...)
	return nil
}

// appendFlat appends a to attrs, resolved, with prefix before its key and
// a group's members flattened to "group.key".
func appendFlat(attrs []slog.Attr, prefix string, a slog.Attr) []slog.Attr {
	a.Value = a.Value.Resolve()
	if a.Value.Kind() != slog.KindGroup {
		if a.Key == "" {
			return attrs
		}
		a.Key = prefix + a.Key
		return append(attrs, a)
	}
	p := prefix
	if a.Key != "" {
		p += a.Key + "."
	}
	for _, g := range a.Value.Group() {
		attrs = appendFlat(attrs, p, g)
	}
	return attrs
}

// observe records the bound UDP address and, during a reload, warnings
// and errors.
func (b *logBridge) observe(msg string, attrs []slog.Attr, level slog.Level) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.offload.observe(msg, attrs)
	if msg == "Nebula interface is active" {
		for _, a := range attrs {
			if a.Key == "udpAddr" {
				if ap, ok := a.Value.Any().(netip.AddrPort); ok {
					b.udp = ap
				}
			}
		}
	}
	if b.capturing && level >= slog.LevelWarn && len(b.captured) < maxCaptured {
		line := redact(msg)
		for _, a := range attrs {
			if a.Key == "error" {
				line += ": " + redact(a.Value.Any())
				break
			}
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

// slogLevel maps the level of a Nebula record onto meshd's. Two errors
// Nebula logs when the process lacks CAP_NET_ADMIN for the socket buffers
// are warnings here: the overlay works without them.
func slogLevel(l slog.Level, msg string) slog.Level {
	switch {
	case l >= slog.LevelError:
		switch msg {
		case "Failed to set listen.read_buffer", "Failed to set listen.write_buffer":
			return slog.LevelWarn
		}
		return slog.LevelError
	case l >= slog.LevelWarn:
		return slog.LevelWarn
	case l >= slog.LevelInfo:
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
