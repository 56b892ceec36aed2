//go:build linux && !android

package tio

// meshd patch (PATCHES.md "Wait for packets in Go's netpoller"): a queue
// whose read or write finds the TUN empty (full) waits for it in Go's
// netpoller, as net.Conn does, instead of in a blocking poll(2). A goroutine
// in a blocking system call keeps its P in the syscall state; each time the
// reader goes back in after a packet, the runtime's sysmon wakes, polls
// every 20 µs for a millisecond and backs off to 10 ms before it takes the P
// away and sleeps again: some 50-60 context switches for every packet that
// ends a quiet spell, most of an idle node's wakeups. A goroutine parked in
// the netpoller holds no P and costs none of that.

import (
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// netpollWaiter parks a reader or writer of a non-blocking fd in Go's
// netpoller. It holds a duplicate of the fd registered with the poller (the
// same open file, so the same readiness), which it owns; the fd itself stays
// the queue's, read and written directly on the fast path. A nil waiter
// (the fd could not be registered) leaves the queue to blockOn.
type netpollWaiter struct {
	f  *os.File
	rc syscall.RawConn

	// The queue's one reader's read, its result, and the callback handed
	// to the poller, made once so that a wait allocates nothing.
	readSys   func() (uintptr, syscall.Errno)
	readN     uintptr
	readErrno syscall.Errno
	readDone  func(uintptr) bool
}

// newNetpollWaiter registers a duplicate of fd, which must be non-blocking,
// with the netpoller; nil when that fails (the caller then polls). readSys
// is the queue's read, called by read.
func newNetpollWaiter(fd int, readSys func() (uintptr, syscall.Errno)) *netpollWaiter {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(dup), "tun")
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
	w := &netpollWaiter{f: f, rc: rc, readSys: readSys}
	w.readDone = func(uintptr) bool {
		w.readN, w.readErrno = w.readSys()
		return w.readErrno != unix.EAGAIN
	}
	return w
}

// read calls readSys until it returns something other than EAGAIN, parking
// in the netpoller between calls, and returns what it returned. It returns
// os.ErrClosed once wake or close was called. One reader at a time.
func (w *netpollWaiter) read() (uintptr, syscall.Errno, error) {
	if err := w.rc.Read(w.readDone); err != nil {
		return 0, 0, netpollClosed(err)
	}
	return w.readN, w.readErrno, nil
}

// write is read for a write, safe for concurrent use.
func (w *netpollWaiter) write(sys func() (uintptr, syscall.Errno)) (uintptr, syscall.Errno, error) {
	var n uintptr
	var errno syscall.Errno
	err := w.rc.Write(func(uintptr) bool {
		n, errno = sys()
		return errno != unix.EAGAIN
	})
	if err != nil {
		return 0, 0, netpollClosed(err)
	}
	return n, errno, nil
}

// wake makes every wait, parked now or later, return os.ErrClosed (the
// queue set's Shutdown: the fd stays open).
func (w *netpollWaiter) wake() {
	_ = w.f.SetDeadline(time.Unix(1, 0))
}

// close releases the duplicate and wakes every wait.
func (w *netpollWaiter) close() error {
	return w.f.Close()
}

// netpollClosed maps what a woken or closed wait returns (the deadline
// wake sets, or the poller's "use of closed file", which os.File's RawConn
// does not translate) to os.ErrClosed, what blockOn returns for a
// shutdown. No other error comes out of a wait on a registered file.
func netpollClosed(error) error {
	return os.ErrClosed
}

// errnoOf is the syscall.Errno that unix.Read or unix.Write returned as
// err, 0 for nil.
func errnoOf(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	return err.(syscall.Errno)
}
