package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshd/meshd/codes"
)

// listenSocket opens the local API socket 0660, group socketGroup when that
// group exists. A leftover path is removed only if it is a socket that
// nothing answers on.
func listenSocket(path, socketGroup string, log *slog.Logger) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, codes.Wrap(codes.StateDir, fmt.Errorf("socket dir: %w", err))
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, codes.Wrap(codes.ConfigInvalid, fmt.Errorf("socket path %s exists and is not a socket", path))
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			_ = c.Close()
			return nil, codes.Wrap(codes.Busy, fmt.Errorf("another meshd answers on %s", path))
		}
		if err := os.Remove(path); err != nil {
			return nil, codes.Wrap(codes.StateDir, err)
		}
	}
	old := unix.Umask(0o117)
	ln, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, codes.Wrap(codes.StateDir, fmt.Errorf("listen %s: %w", path, err))
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o660); err != nil {
		_ = ln.Close()
		return nil, codes.Wrap(codes.StateDir, err)
	}
	if g, err := user.LookupGroup(socketGroup); err == nil {
		gid, _ := strconv.Atoi(g.Gid)
		// Under the packaged unit (Group=meshd) the socket has the group
		// already, and the syscall filter forbids chown: only chown when needed.
		if st, err := os.Stat(path); err != nil || st.Sys().(*syscall.Stat_t).Gid != uint32(gid) {
			if err := os.Chown(path, -1, gid); err != nil {
				log.Warn("cannot give the socket to its group", "group", socketGroup, "err", err)
			}
		}
	}
	return ln, nil
}

// actor is who called the local API, from SO_PEERCRED.
type actor struct {
	UID, GID uint32
	PID      int32
	Known    bool
}

func (a actor) String() string {
	if !a.Known {
		return "local:unknown"
	}
	return fmt.Sprintf("local:uid=%d,pid=%d", a.UID, a.PID)
}

type actorKey struct{}

// peerCredContext records the caller's credentials on each connection.
func peerCredContext(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return context.WithValue(ctx, actorKey{}, actor{})
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return context.WithValue(ctx, actorKey{}, actor{})
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return context.WithValue(ctx, actorKey{}, actor{})
	}
	return context.WithValue(ctx, actorKey{}, actor{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid, Known: true})
}

func actorFrom(ctx context.Context) actor {
	a, _ := ctx.Value(actorKey{}).(actor)
	return a
}

// mayWrite: root, meshd's own user, or a member of the socket's group.
func mayWrite(a actor, socketGroup string) error {
	if !a.Known {
		return codes.Wrap(codes.PermissionDenied, errors.New("caller credentials unknown"))
	}
	if a.UID == 0 || int(a.UID) == os.Geteuid() {
		return nil
	}
	if g, err := user.LookupGroup(socketGroup); err == nil {
		if gid, _ := strconv.Atoi(g.Gid); uint32(gid) == a.GID {
			return nil
		}
		if u, err := user.LookupId(strconv.Itoa(int(a.UID))); err == nil {
			if gids, err := u.GroupIds(); err == nil {
				for _, id := range gids {
					if id == g.Gid {
						return nil
					}
				}
			}
		}
	}
	return codes.Wrap(codes.PermissionDenied, fmt.Errorf("uid %d is not root and not in group %s", a.UID, socketGroup))
}
