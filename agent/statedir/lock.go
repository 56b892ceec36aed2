package statedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/meshd/meshd/codes"
)

// lockFile is <state>/meshd.pid: meshd holds an exclusive flock on it for
// as long as it runs, and writes its PID into it. The kernel drops the lock
// when the process dies however it dies, so a file left by a killed meshd
// never blocks the next one; Wipe leaves it alone.
const lockFile = "meshd.pid"

// Lock is the held lock on the state dir; Release drops it.
type Lock struct{ f *os.File }

// TakeLock takes <state>/meshd.pid, or fails with codes.AlreadyRunning
// naming the PID of the meshd that holds it. Two meshd on one state dir
// would each run raft, the CA and the overlay from the same files.
func TakeLock(stateDir string) (*Lock, error) {
	path := filepath.Join(stateDir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, codes.Wrap(codes.StateDir, fmt.Errorf("lock file: %w", err))
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			b, _ := os.ReadFile(path)
			return nil, codes.Wrap(codes.AlreadyRunning, fmt.Errorf("meshd pid %s holds the state dir %s (lock %s)",
				pidOrUnknown(strings.TrimSpace(string(b))), stateDir, path))
		}
		return nil, codes.Wrap(codes.StateDir, fmt.Errorf("lock %s: %w", path, err))
	}
	if err := f.Truncate(0); err != nil {
		_ = f.Close()
		return nil, codes.Wrap(codes.StateDir, fmt.Errorf("lock file %s: %w", path, err))
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		_ = f.Close()
		return nil, codes.Wrap(codes.StateDir, fmt.Errorf("lock file %s: %w", path, err))
	}
	return &Lock{f: f}, nil
}

// Release drops the lock. The file stays: removing it would let a third
// meshd lock a new inode while a second still waits on the old one.
func (l *Lock) Release() {
	if l != nil && l.f != nil {
		_ = l.f.Close()
		l.f = nil
	}
}

func pidOrUnknown(s string) string {
	if _, err := strconv.Atoi(s); err != nil {
		return "unknown"
	}
	return s
}
