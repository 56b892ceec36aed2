package localclient_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient"
	"github.com/meshd/meshd/agent/localclient/localclienttest"
	"github.com/meshd/meshd/codes"
)

// TestDialErrors: how a failure to connect to the socket is coded. The
// socket's permissions refusing this user is PermissionDenied (meshctl
// exits 1 and names root or the meshd group); no socket, or no one
// listening on it, is DaemonUnreachable (meshctl exits 3).
func TestDialErrors(t *testing.T) {
	tests := []struct {
		name string
		err  syscall.Errno
		want codes.Code
	}{
		{"fail/eacces", syscall.EACCES, codes.PermissionDenied},
		{"fail/eperm", syscall.EPERM, codes.PermissionDenied},
		{"fail/enoent", syscall.ENOENT, codes.DaemonUnreachable},
		{"fail/econnrefused", syscall.ECONNREFUSED, codes.DaemonUnreachable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// What net.Dialer returns for a failed connect(2).
			c := &localclient.Client{Socket: "/run/meshd/meshd.sock", Dial: func(context.Context, string, string) (net.Conn, error) {
				return nil, &net.OpError{Op: "dial", Net: "unix", Addr: &net.UnixAddr{Name: "/run/meshd/meshd.sock", Net: "unix"},
					Err: os.NewSyscallError("connect", tt.err)}
			}}
			_, err := c.Status(t.Context())
			if got := codes.Of(err); got != tt.want {
				t.Fatalf("connect fails with %v: codes.Of(%v) = %q, want %q", tt.err, err, got, tt.want)
			}
			if got, want := errors.Is(err, localclient.ErrUnreachable), tt.want == codes.DaemonUnreachable; got != want {
				t.Fatalf("errors.Is(%v, ErrUnreachable) = %v, want %v", err, got, want)
			}
		})
	}
}

// permissionChildEnv marks the child run of TestSocketPermissionDenied: the
// test binary re-run as an unprivileged user, since root's connect(2)
// ignores the socket file's mode.
const permissionChildEnv = "MESHD_LOCALCLIENT_PERMISSION_CHILD"

// TestSocketPermissionDenied: a socket this user may not write to (mode
// 0000, like meshd's 0660 socket to a user outside the group) gives
// PermissionDenied from a real connect(2), and nothing reaches meshd. As
// root it re-runs itself as nobody, because root connects regardless.
func TestSocketPermissionDenied(t *testing.T) {
	if os.Geteuid() == 0 {
		if os.Getenv(permissionChildEnv) != "" {
			t.Fatal("the child run is still root")
		}
		rerunAsNobody(t)
		return
	}
	var served atomic.Int32
	sock := localclienttest.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		writeJSON(w, http.StatusOK, apitype.Status{State: "running"})
	}))
	c := &localclient.Client{Socket: sock}
	// The control: with its mode as created, the socket answers this user.
	if _, err := c.Status(t.Context()); err != nil {
		t.Fatalf("before chmod: Status = %v", err)
	}
	if err := os.Chmod(sock, 0); err != nil {
		t.Fatal(err)
	}
	_, err := c.Status(t.Context())
	if got := codes.Of(err); got != codes.PermissionDenied {
		t.Fatalf("socket mode 0000, uid %d: codes.Of(%v) = %q, want %q", os.Geteuid(), err, got, codes.PermissionDenied)
	}
	if !errors.Is(err, syscall.EACCES) {
		t.Errorf("errors.Is(%v, EACCES) = false: the cause is lost", err)
	}
	if errors.Is(err, localclient.ErrUnreachable) {
		t.Errorf("a refused connect was reported as meshd unreachable: %v", err)
	}
	if n := served.Load(); n != 1 {
		t.Errorf("meshd saw %d requests, want only the control's", n)
	}
}

// rerunAsNobody runs TestSocketPermissionDenied again in a copy of this
// test binary as the user nobody, which it can read and execute.
func rerunAsNobody(t *testing.T) {
	t.Helper()
	uid, gid := 65534, 65534
	if u, err := user.Lookup("nobody"); err == nil {
		uid, _ = strconv.Atoi(u.Uid)
		gid, _ = strconv.Atoi(u.Gid)
	}
	self, err := os.Executable()
	if err != nil {
		t.Skipf("as root, the test re-runs itself as nobody, but cannot find its own binary: %v", err)
	}
	dir := localclienttest.ShortDir(t)
	tmp := filepath.Join(dir, "tmp")
	bin := filepath.Join(dir, "localclient.test")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(copyFile(self, bin), os.Chmod(dir, 0o755), os.Chown(tmp, uid, gid)); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bin, "-test.run=^TestSocketPermissionDenied$", "-test.v", "-test.count=1")
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), permissionChildEnv+"=1", "TMPDIR="+tmp, "HOME="+tmp, "GOCOVERDIR=")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	t.Logf("re-run as uid %d:\n%s", uid, out)
	if err != nil {
		t.Fatalf("child as uid %d: %v", uid, err)
	}
	if !strings.Contains(string(out), "--- PASS: TestSocketPermissionDenied") {
		t.Fatal("the child did not run and pass TestSocketPermissionDenied")
	}
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
