package gossip

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/meshd/meshd/codes"
)

// probeSnapshot opens (creating, 0600) the snapshot file the way serf will,
// so an unusable path fails before serf starts goroutines.
// checkSnapshot moves a serf snapshot that does not parse aside (to
// <path>.corrupt) and logs so: serf would otherwise replay garbage, or
// skip it silently. Nothing in it is needed: the node rejoins through the
// peers meshd knows (raft or the node list), and serf writes a new one.
func checkSnapshot(path string, log *slog.Logger) error {
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return codes.Wrap(codes.StateDir, fmt.Errorf("gossip: snapshot %s: %w", path, err))
	}
	bad := snapshotProblem(b)
	if bad == "" {
		return nil
	}
	aside := path + ".corrupt"
	if err := os.Rename(path, aside); err != nil {
		return codes.Wrap(codes.StateDir, fmt.Errorf("gossip: snapshot %s is corrupt (%s) and cannot be moved aside: %w", path, bad, err))
	}
	log.Warn("serf snapshot is corrupt; moved aside, rebuilding it from the peers meshd knows",
		"code", codes.StateCorrupt, "snapshot", path, "moved_to", aside, "problem", bad)
	return nil
}

// snapshotProblem says what is wrong with a serf snapshot, or "" when each
// line is one serf writes: alive, not-alive, the three clocks, coordinate,
// leave, or a comment, and the last one is complete.
func snapshotProblem(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if b[len(b)-1] != '\n' {
		return "the last line is incomplete"
	}
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		ok := false
		switch {
		case strings.HasPrefix(line, "alive: "):
			f := strings.Fields(strings.TrimPrefix(line, "alive: "))
			if len(f) == 2 && utf8.ValidString(f[0]) {
				_, err := netip.ParseAddrPort(f[1])
				ok = err == nil
			}
		case strings.HasPrefix(line, "not-alive: "):
			f := strings.Fields(strings.TrimPrefix(line, "not-alive: "))
			ok = len(f) == 1 && utf8.ValidString(f[0])
		case strings.HasPrefix(line, "clock: "), strings.HasPrefix(line, "event-clock: "), strings.HasPrefix(line, "query-clock: "):
			_, err := strconv.ParseUint(line[strings.Index(line, ": ")+2:], 10, 64)
			ok = err == nil
		case strings.HasPrefix(line, "coordinate: "):
			ok = json.Valid([]byte(strings.TrimPrefix(line, "coordinate: ")))
		case line == "leave", strings.HasPrefix(line, "#"):
			ok = true
		}
		if !ok {
			return fmt.Sprintf("line %d is not one serf writes", i+1)
		}
	}
	return ""
}

func probeSnapshot(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return codes.Wrap(codes.StateDir, fmt.Errorf("gossip: snapshot: %w", err))
	}
	return f.Close()
}
