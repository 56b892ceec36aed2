//go:build !android && !e2e_testing

package udp

// meshd patch (PATCHES.md "Wait for packets in Go's netpoller"): the
// listener waits for datagrams in Go's netpoller, as net.UDPConn does,
// instead of in a blocking recvmmsg(2). A goroutine in a blocking system
// call keeps its P in the syscall state; each time the reader goes back in
// after a packet, the runtime's sysmon wakes, polls every 20 µs for a
// millisecond and backs off to 10 ms before it takes the P away and sleeps
// again: some 50-60 context switches for every packet that ends a quiet
// spell, most of an idle node's wakeups. A goroutine parked in the
// netpoller holds no P and costs none of that.
//
// The socket itself stays blocking, so that sendto and sendmmsg still wait
// for room in the send buffer as upstream's do; only the read is
// non-blocking (MSG_DONTWAIT), and between reads the reader parks on a
// duplicate of the socket registered with the poller (the same socket, so
// the same readiness).

import (
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// recvWaiter is the reader's side of the poller: the duplicate, its
// RawConn, and the recvmmsg it repeats, with the callback handed to the
// poller made once so that a wait allocates nothing. One reader at a time.
type recvWaiter struct {
	f  *os.File
	rc syscall.RawConn

	fd    int
	msgs  []rawMessage
	n     uintptr
	errno syscall.Errno
	done  func(uintptr) bool
}

// newRecvWaiter registers a duplicate of the blocking socket fd with the
// netpoller; nil when that fails (the listener then blocks in recvmmsg as
// upstream's does). The duplicate shares the socket's O_NONBLOCK flag, which
// os.NewFile reads to decide to register it, so the flag is set for that
// call and cleared again.
func newRecvWaiter(fd int) *recvWaiter {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		_ = unix.Close(dup)
		return nil
	}
	f := os.NewFile(uintptr(dup), "udp")
	if err := unix.SetNonblock(fd, false); err != nil {
		_ = f.Close()
		return nil
	}
	// A file the poller did not take cannot have a deadline.
	if f.SetDeadline(time.Time{}) != nil {
		_ = f.Close()
		return nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil
	}
	w := &recvWaiter{f: f, rc: rc, fd: fd}
	w.done = func(uintptr) bool {
		w.n, _, w.errno = unix.Syscall6(
			unix.SYS_RECVMMSG,
			uintptr(w.fd),
			uintptr(unsafe.Pointer(&w.msgs[0])),
			uintptr(len(w.msgs)),
			unix.MSG_WAITFORONE|unix.MSG_DONTWAIT,
			0,
			0,
		)
		return w.errno != unix.EAGAIN
	}
	return w
}

// recvmmsg reads up to len(msgs) datagrams, parking in the poller until at
// least one is there. A wait woken by wake or close returns EBADF, which
// the caller, having seen its closed flag, reports as net.ErrClosed.
func (w *recvWaiter) recvmmsg(msgs []rawMessage) (uintptr, syscall.Errno) {
	w.msgs = msgs
	err := w.rc.Read(w.done)
	w.msgs = nil
	if err != nil {
		return 0, unix.EBADF
	}
	return w.n, w.errno
}

// wake makes every wait, parked now or later, return (Shutdown).
func (w *recvWaiter) wake() {
	_ = w.f.SetDeadline(time.Unix(1, 0))
}

// close releases the duplicate and wakes every wait.
func (w *recvWaiter) close() error {
	return w.f.Close()
}
