package localapi

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/meshd/meshd/codes"
)

// Listen opens the local API socket 0660, group socketGroup when that
// group exists. A leftover path is removed only if it is a socket that
// nothing answers on.
func Listen(path, socketGroup string, log *slog.Logger) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, codes.Wrap(codes.StateDir, fmt.Errorf("socket dir: %w", err))
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, codes.Wrap(codes.ConfigInvalid, fmt.Errorf("socket path %s exists and is not a socket", path))
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			pid := peerPID(c)
			_ = c.Close()
			return nil, codes.Wrap(codes.AlreadyRunning, fmt.Errorf("meshd pid %d answers on the socket %s", pid, path))
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

// Actor is who called the local API: the credentials the kernel recorded
// when the caller connected (SO_PEERCRED and SO_PEERGROUPS).
//
// Why from the socket and not from /proc/<pid>/status:
//   - No pid race. The kernel snapshots these credentials at connect(2) and
//     keeps them with the socket; they cannot come from another process.
//     A /proc lookup by pid can: the caller may hand the connection to a
//     child and exit, and its pid be reused by a process in the group. Re-reading
//     SO_PEERCRED after such a read proves nothing, since it returns the same
//     connect-time snapshot, dead pid included.
//   - The packaged unit runs meshd as User=meshd with ProtectProc=invisible:
//     another user's /proc/<pid> does not exist for meshd, so a /proc check
//     would refuse every member of the group.
//   - They are the caller's real groups (what setgroups(2) and the login
//     session or service manager gave the process), not /etc/group's list.
type Actor struct {
	UID, GID  uint32   // effective uid and gid
	PID       int32    // for audit only; never used to look credentials up
	Groups    []uint32 // supplementary gids; meaningful only when GroupsErr is nil
	GroupsErr error    // why the supplementary groups could not be read
	Known     bool     // SO_PEERCRED was read
}

func (a Actor) String() string {
	if !a.Known {
		return "local:unknown"
	}
	return fmt.Sprintf("local:uid=%d,pid=%d", a.UID, a.PID)
}

type actorKey struct{}

// PeerCredContext records the caller's credentials on each connection.
func PeerCredContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, actorKey{}, peerActor(c))
}

// peerActor reads the credentials the peer of c connected with. Without
// SO_PEERCRED the Actor is unknown; without SO_PEERGROUPS it carries
// GroupsErr, and MayWrite refuses it unless it is root or meshd's user.
func peerActor(c net.Conn) Actor {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Actor{}
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Actor{}
	}
	var a Actor
	if err := raw.Control(func(fd uintptr) {
		cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil {
			return
		}
		a = Actor{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid, Known: true}
		a.Groups, a.GroupsErr = peerGroups(int(fd))
	}); err != nil {
		return Actor{}
	}
	return a
}

// peerGroups reads SO_PEERGROUPS (Linux 4.13): the peer's supplementary
// groups at connect time, as native-endian 32-bit gids.
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]byte, 4*64)
	for {
		n := uint32(len(buf))
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		if errno == unix.ERANGE && int(n) > len(buf) {
			buf = make([]byte, n) // the kernel said how much room it needs
			continue
		}
		if errno != 0 {
			return nil, os.NewSyscallError("getsockopt SO_PEERGROUPS", errno)
		}
		if int(n) > len(buf) {
			return nil, fmt.Errorf("getsockopt SO_PEERGROUPS: length %d exceeds the buffer's %d", n, len(buf))
		}
		return parsePeerGroups(buf[:n])
	}
}

// parsePeerGroups decodes an SO_PEERGROUPS value. A length that is not a
// whole number of gids is an error, never a shorter list.
func parsePeerGroups(b []byte) ([]uint32, error) {
	if len(b)%4 != 0 {
		return nil, fmt.Errorf("SO_PEERGROUPS value of %d bytes is not a list of 32-bit gids", len(b))
	}
	gids := make([]uint32, 0, len(b)/4)
	for i := 0; i < len(b); i += 4 {
		gids = append(gids, binary.NativeEndian.Uint32(b[i:]))
	}
	return gids, nil
}

// ActorFrom is the caller PeerCredContext recorded on ctx's connection;
// the zero Actor (unknown, refused by MayWrite) when there is none.
func ActorFrom(ctx context.Context) Actor {
	a, _ := ctx.Value(actorKey{}).(Actor)
	return a
}

// MayWrite: root, meshd's own user, or a caller whose effective gid or one
// of whose supplementary gids is the socket group's. It fails closed: an
// unknown caller, unreadable supplementary groups or a socket group that
// does not resolve all deny.
func MayWrite(a Actor, socketGroup string) error {
	if !a.Known {
		return codes.Wrap(codes.PermissionDenied, errors.New("caller credentials unknown"))
	}
	if a.UID == 0 || int(a.UID) == os.Geteuid() {
		return nil
	}
	g, err := user.LookupGroup(socketGroup)
	if err != nil {
		return codes.Wrap(codes.PermissionDenied, fmt.Errorf("uid %d is not root, and socket group %s does not resolve: %w", a.UID, socketGroup, err))
	}
	gid, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return codes.Wrap(codes.PermissionDenied, fmt.Errorf("socket group %s has gid %q: %w", socketGroup, g.Gid, err))
	}
	if a.GroupsErr != nil {
		return codes.Wrap(codes.PermissionDenied, fmt.Errorf("uid %d is not root and its supplementary groups are unknown: %w", a.UID, a.GroupsErr))
	}
	if !a.inGroup(uint32(gid)) {
		return codes.Wrap(codes.PermissionDenied, fmt.Errorf("uid %d (gid %d, groups %v) is not root and not in group %s (%d)",
			a.UID, a.GID, a.Groups, socketGroup, gid))
	}
	return nil
}

// inGroup reports whether a's effective gid or one of its supplementary
// gids is gid. Check GroupsErr first: MayWrite does.
func (a Actor) inGroup(gid uint32) bool {
	return a.GID == gid || slices.Contains(a.Groups, gid)
}

// peerPID is the PID of the process that accepted c (SO_PEERCRED of
// our end is the listener's credentials), or 0 when it cannot be read.
func peerPID(c net.Conn) int32 {
	a := peerActor(c)
	if !a.Known {
		return 0
	}
	return a.PID
}

// WithActor is ctx carrying a as the caller, as PeerCredContext records
// it for a connection: for callers that are not the socket (tests).
func WithActor(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}
