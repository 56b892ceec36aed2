package gossip

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/meshd/meshd/codes"
)

// Log attribute keys.
const (
	logKeyLib  = "lib"  // which library printed the line: serf or memberlist
	logKeyCode = "code" // the meshd code of a user-visible failure
	logKeyFrom = "from" // the peer address memberlist appends as "from=ADDR"
)

// keyErrorMarkers are fragments of memberlist log lines that report a
// received message this node's keyring could not decrypt (or a plaintext
// message, which an encrypted cluster refuses just the same). memberlist
// exposes no counter or callback for these, so the log stream is the only
// place they show up. Matched case-insensitively; a line counts once.
var keyErrorMarkers = []string{
	"no installed keys could decrypt", // stream and packet, any version
	"decrypt packet failed",           // packet too short, unknown version, ...
	"remote state is not encrypted",   // a plaintext peer
}

// logSink receives the lines serf and memberlist print through their
// *log.Logger and forwards each to slog at the level the line names. It
// also counts key errors.
type logSink struct {
	log       *slog.Logger
	keyErrors atomic.Uint64
	suspects  *suspicions // this node's own suspicions (suspect.go)
	changes   *changes    // rung at each member event and new suspicion (changes.go)
	// cutOff: this node is cut off from the cluster on purpose (CutOff),
	// so memberlist's failed sends are expected, not errors.
	cutOff atomic.Bool
}

// CutOff says whether this node is cut off from its cluster on purpose (a
// removed node's overlay lets nothing through): while it is, memberlist's
// "Failed to send ..." errors, which every gossip tick with a message
// queued then logs, are logged at debug. Everything else keeps its level.
func (g *Gossip) CutOff(cut bool) { g.sink.cutOff.Store(cut) }

// newLogSink returns a sink forwarding to l (nil discards); a suspicion it
// reads counts for suspectFor.
func newLogSink(l *slog.Logger, suspectFor time.Duration) *logSink {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	ch := &changes{}
	return &logSink{log: l, suspects: newSuspicions(suspectFor, ch.ring), changes: ch}
}

// logger returns a *log.Logger for serf and memberlist that writes here.
func (s *logSink) logger() *log.Logger {
	return log.New(s, "", 0)
}

// Write implements io.Writer. log.Logger calls it once per line; it copes
// with several lines too. It never fails.
func (s *logSink) Write(p []byte) (int, error) {
	for line := range bytes.SplitSeq(bytes.TrimRight(p, "\n"), []byte("\n")) {
		if len(line) > 0 {
			s.line(string(line))
		}
	}
	return len(p), nil
}

// line handles one log line such as
// "[ERR] memberlist: Decrypt packet failed: ... from=1.2.3.4:7946".
func (s *logSink) line(text string) {
	level, lib, msg := parseLogLine(text)
	if lib == "memberlist" {
		s.suspects.saw(msg)
	}
	if lib == "memberlist" && level == slog.LevelError && s.cutOff.Load() && strings.HasPrefix(msg, "Failed to send") {
		level = slog.LevelDebug
	}
	key := isKeyError(msg)
	if key {
		s.keyErrors.Add(1)
		level = slog.LevelWarn
	}
	if !s.log.Enabled(context.Background(), level) {
		return
	}
	attrs := make([]slog.Attr, 1, 3)
	attrs[0] = slog.String(logKeyLib, lib)
	if m, from, ok := cutFrom(msg); ok {
		msg = m
		attrs = append(attrs, slog.String(logKeyFrom, from))
	}
	if key {
		attrs = append(attrs, slog.String(logKeyCode, codes.GossipKey.String()))
	}
	s.log.LogAttrs(context.Background(), level, msg, attrs...)
}

// cutFrom splits memberlist's trailing peer address, " from=1.2.3.4:7946"
// (or " from=<unknown address>", memberlist.LogAddress), off a message.
func cutFrom(msg string) (string, string, bool) {
	i := strings.LastIndex(msg, " from=")
	if i < 0 {
		return msg, "", false
	}
	from := msg[i+len(" from="):]
	if from == "" || (strings.Contains(from, " ") && from != "<unknown address>") {
		return msg, "", false
	}
	return msg[:i], from, true
}

// parseLogLine splits "[LEVEL] lib: message" into its parts. A line without
// a level is logged at Info; one without a "serf:"/"memberlist:" prefix
// keeps lib empty.
func parseLogLine(text string) (slog.Level, string, string) {
	level := slog.LevelInfo
	if rest, ok := strings.CutPrefix(text, "["); ok {
		if tag, msg, ok := strings.Cut(rest, "]"); ok {
			level = levelOf(tag)
			text = strings.TrimSpace(msg)
		}
	}
	for _, lib := range []string{"memberlist", "serf"} {
		if msg, ok := strings.CutPrefix(text, lib+": "); ok {
			return level, lib, msg
		}
	}
	return level, "", text
}

// levelOf maps the hashicorp level tags to slog levels.
func levelOf(tag string) slog.Level {
	switch strings.ToUpper(tag) {
	case "TRACE", "DEBUG":
		return slog.LevelDebug
	case "WARN", "WARNING":
		return slog.LevelWarn
	case "ERR", "ERROR":
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// isKeyError reports whether a log message is about a message no installed
// key could decrypt.
func isKeyError(msg string) bool {
	lower := strings.ToLower(msg)
	for _, m := range keyErrorMarkers {
		if strings.Contains(lower, m) {
			return true
		}
	}
	return false
}
