package localapi

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	goruntime "runtime"
	"slices"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/meshd/meshd/codes"
)

func TestParsePeerGroups(t *testing.T) {
	gids := func(g ...uint32) []byte {
		b := make([]byte, 0, 4*len(g))
		for _, x := range g {
			b = binary.NativeEndian.AppendUint32(b, x)
		}
		return b
	}
	tests := []struct {
		name    string
		in      []byte
		want    []uint32
		wantErr bool
	}{
		{"ok/none", nil, []uint32{}, false},
		{"ok/one", gids(4), []uint32{4}, false},
		{"ok/several", gids(0, 27, 999, 65534, 1<<31), []uint32{0, 27, 999, 65534, 1 << 31}, false},
		{"fail/short", []byte{1, 0, 0}, nil, true},
		{"fail/ragged", append(gids(27), 1), nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parsePeerGroups(tt.in)
			if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
				t.Fatalf("parsePeerGroups(%v) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// TestMayWrite pins the rule on hand-made credentials; the socket group is
// the test's own effective group, which exists on every system.
func TestMayWrite(t *testing.T) {
	g, err := user.LookupGroupId(strconv.Itoa(os.Getegid()))
	if err != nil {
		t.Skipf("the test's own gid %d has no name: %v", os.Getegid(), err)
	}
	gid := uint32(os.Getegid())
	other := uint32(4242) // neither root nor the uid meshd (this test) runs as
	if os.Geteuid() == int(other) {
		other++
	}
	const noGroup = 4_000_000_001
	unreadable := errors.New("getsockopt SO_PEERGROUPS: protocol not available")
	tests := []struct {
		name  string
		a     Actor
		group string
		allow bool
	}{
		{"ok/root", Actor{UID: 0, GID: noGroup, GroupsErr: unreadable, Known: true}, g.Name, true},
		{"ok/meshd-own-user", Actor{UID: uint32(os.Geteuid()), GID: noGroup, Known: true}, g.Name, true},
		{"ok/effective-gid", Actor{UID: other, GID: gid, Known: true}, g.Name, true},
		{"ok/supplementary-gid", Actor{UID: other, GID: noGroup, Groups: []uint32{1, gid, 7}, Known: true}, g.Name, true},
		{"fail/not-a-member", Actor{UID: other, GID: noGroup, Groups: []uint32{1, 7}, Known: true}, g.Name, false},
		{"fail/no-groups", Actor{UID: other, GID: noGroup, Groups: []uint32{}, Known: true}, g.Name, false},
		{"fail/unknown-caller", Actor{}, g.Name, false},
		{"fail/groups-unreadable-even-with-egid", Actor{UID: other, GID: gid, GroupsErr: unreadable, Known: true}, g.Name, false},
		{"fail/socket-group-unknown", Actor{UID: other, GID: gid, Groups: []uint32{gid}, Known: true}, "meshd-test-no-such-group", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := MayWrite(tt.a, tt.group)
			if tt.allow && err != nil {
				t.Fatalf("MayWrite(%s, %q) = %v, want allowed", describe(tt.a), tt.group, err)
			}
			if !tt.allow && codes.Of(err) != codes.PermissionDenied {
				t.Fatalf("MayWrite(%s, %q) = %v (code %q), want %s", describe(tt.a), tt.group, err, codes.Of(err), codes.PermissionDenied)
			}
		})
	}
}

// TestPeerActorOwnCredentials: the Actor of a real connection from this
// process carries this process's pid, effective uid and gid, and its
// supplementary groups as os.Getgroups gives them; it is in each of those
// groups and in no other.
func TestPeerActorOwnCredentials(t *testing.T) {
	ln := listenAbstract(t)
	who := connectFrom(t, ln.Addr().String(), nil)
	a := peerActor(accept(t, ln))

	own, err := os.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	if who.pid != os.Getpid() || !slices.Equal(sorted(who.groups), sorted(own)) {
		t.Fatalf("the connecting thread reports %+v; the process has pid %d, groups %v", who, os.Getpid(), own)
	}
	if !a.Known || a.GroupsErr != nil || int(a.PID) != who.pid || int(a.UID) != who.uid || int(a.GID) != who.gid {
		t.Fatalf("Actor %s, want pid %d uid %d gid %d with groups", describe(a), who.pid, who.uid, who.gid)
	}
	var got []int
	for _, g := range a.Groups {
		got = append(got, int(g))
	}
	if !slices.Equal(sorted(got), sorted(own)) {
		t.Fatalf("Actor groups %v, os.Getgroups() %v", got, own)
	}
	supplementaryOnly := 0
	for _, g := range own {
		if g == who.gid {
			continue
		}
		supplementaryOnly++
		if !a.inGroup(uint32(g)) {
			t.Errorf("Actor not in its supplementary group %d", g)
		}
	}
	if supplementaryOnly == 0 {
		t.Logf("this process (gid %d) has no supplementary group besides its effective one; "+
			"TestMayWriteSupplementaryGroup covers that case as root", who.gid)
	}
	if !a.inGroup(uint32(who.gid)) {
		t.Errorf("Actor not in its effective group %d", who.gid)
	}
	notMember := uint32(who.gid) + 1
	for slices.Contains(a.Groups, notMember) || notMember == a.GID {
		notMember++
	}
	if a.inGroup(notMember) {
		t.Errorf("Actor (gid %d, groups %v) found in group %d", a.GID, a.Groups, notMember)
	}
}

// TestMayWriteSupplementaryGroup runs the real check, through the same
// ConnContext meshd uses, on a caller that is in the socket group only by a
// supplementary group that /etc/group does not list for it: the case the
// old /etc/group lookup refused. It needs root to give the connecting
// thread a uid other than the test's own (MayWrite lets meshd's own uid
// through) and groups of its own.
func TestMayWriteSupplementaryGroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the connecting thread must take another uid and a supplementary group")
	}
	if goruntime.GOARCH == "386" || goruntime.GOARCH == "arm" {
		t.Skip("SYS_SETGROUPS takes 16-bit gids on " + goruntime.GOARCH)
	}
	uid := 65534
	if u, err := user.Lookup("nobody"); err == nil {
		uid, _ = strconv.Atoi(u.Uid)
	}
	groups := namedGroups(t, 3, uid)
	effective, supplementary, stranger := groups[0], groups[1], groups[2]
	egid, _ := strconv.Atoi(effective.Gid)
	sgid, _ := strconv.Atoi(supplementary.Gid)

	ln := listenAbstract(t)
	who := connectFrom(t, ln.Addr().String(), &ids{uid: uid, gid: egid, groups: []int{sgid}})
	a := ActorFrom(PeerCredContext(t.Context(), accept(t, ln)))
	if !a.Known || int(a.PID) != os.Getpid() || int(a.UID) != uid || int(a.GID) != egid || who.uid != uid || who.gid != egid {
		t.Fatalf("Actor %s, thread %+v: want uid %d gid %d from pid %d", describe(a), who, uid, egid, os.Getpid())
	}
	if err := MayWrite(a, supplementary.Name); err != nil {
		t.Errorf("uid %d with supplementary group %s (%s): MayWrite = %v, want allowed", uid, supplementary.Name, supplementary.Gid, err)
	}
	if err := MayWrite(a, effective.Name); err != nil {
		t.Errorf("uid %d with effective group %s (%s): MayWrite = %v, want allowed", uid, effective.Name, effective.Gid, err)
	}
	if err := MayWrite(a, stranger.Name); codes.Of(err) != codes.PermissionDenied {
		t.Errorf("uid %d, not in group %s (%s): MayWrite = %v, want %s", uid, stranger.Name, stranger.Gid, err, codes.PermissionDenied)
	}
}

// namedGroups returns n groups that have names, are not uid's primary group
// and do not list uid's user as a member in the group database: only the
// connecting thread's own credentials can put it in them.
func namedGroups(t *testing.T, n, uid int) []*user.Group {
	t.Helper()
	var listed []string
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		listed, _ = u.GroupIds()
		listed = append(listed, u.Gid)
	}
	var out []*user.Group
	for gid := 1; gid < 65534 && len(out) < n; gid++ {
		g, err := user.LookupGroupId(strconv.Itoa(gid))
		if err != nil || slices.Contains(listed, g.Gid) {
			continue
		}
		out = append(out, g)
	}
	if len(out) < n {
		t.Skipf("needs %d named groups that uid %d is not listed in; found %d", n, uid, len(out))
	}
	return out
}

// ids is what a connecting thread reports about itself.
type ids struct {
	pid, uid, gid int
	groups        []int
}

// connectFrom connects to the abstract unix socket addr from a goroutine
// locked to its own OS thread and returns that thread's ids as it sees
// them. With become set (root only), the thread first takes that uid, gid
// and those supplementary groups through raw, per-thread syscalls; it is
// never unlocked, so the runtime ends the thread instead of reusing it.
func connectFrom(t *testing.T, addr string, become *ids) ids {
	t.Helper()
	type result struct {
		who ids
		fd  int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		goruntime.LockOSThread() // never unlocked, see above
		r := result{fd: -1}
		defer func() { ch <- r }()
		if become != nil {
			if r.err = setThreadIDs(*become); r.err != nil {
				return
			}
		}
		r.who = ids{pid: os.Getpid(), uid: os.Geteuid(), gid: os.Getegid()}
		if r.who.groups, r.err = os.Getgroups(); r.err != nil {
			return
		}
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			r.err = err
			return
		}
		if err := unix.Connect(fd, &unix.SockaddrUnix{Name: addr}); err != nil {
			_ = unix.Close(fd)
			r.err = err
			return
		}
		r.fd = fd
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("connect %s: %v", addr, r.err)
	}
	t.Cleanup(func() { _ = unix.Close(r.fd) })
	return r.who
}

// setThreadIDs gives the calling OS thread (only) the ids in w; groups
// must not be empty.
func setThreadIDs(w ids) error {
	gs := make([]uint32, 0, len(w.groups))
	for _, g := range w.groups {
		gs = append(gs, uint32(g))
	}
	if len(gs) == 0 {
		return errors.New("setThreadIDs: no groups")
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(gs)), uintptr(unsafe.Pointer(&gs[0])), 0); e != 0 {
		return os.NewSyscallError("setgroups", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(w.gid), uintptr(w.gid), uintptr(w.gid)); e != 0 {
		return os.NewSyscallError("setresgid", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(w.uid), uintptr(w.uid), uintptr(w.uid)); e != 0 {
		return os.NewSyscallError("setresuid", e)
	}
	return nil
}

// listenAbstract listens on a fresh abstract unix socket: no file, so no
// file permissions stand between it and a thread with other credentials.
func listenAbstract(t *testing.T) *net.UnixListener {
	t.Helper()
	ln, err := net.Listen("unix", "@meshd-test-"+strconv.Itoa(os.Getpid())+"-"+rand.Text())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln.(*net.UnixListener)
}

// accept takes the connection connectFrom already queued.
func accept(t *testing.T, ln *net.UnixListener) net.Conn {
	t.Helper()
	_ = ln.SetDeadline(time.Now().Add(10 * time.Second)) // a bound, not a wait: the connection is queued
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// describe shows every field of a; its String is for audit and shows less.
func describe(a Actor) string {
	return fmt.Sprintf("{known %v pid %d uid %d gid %d groups %v groupsErr %v}", a.Known, a.PID, a.UID, a.GID, a.Groups, a.GroupsErr)
}

func sorted(s []int) []int {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
