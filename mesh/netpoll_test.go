package mesh

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/slackhq/nebula/overlay/tio"
	"github.com/slackhq/nebula/udp"
	"golang.org/x/sys/unix"
)

// Nebula patch 7 (third_party/nebula/PATCHES.md "Wait for packets in Go's
// netpoller"): the UDP listener and the TUN queues wait for a packet parked
// in Go's netpoller (goroutine state "IO wait"), not in a blocking system
// call ("syscall"), which costs an idle process the runtime's sysmon
// spinning after every packet. Without the patch each reader below is
// found in "syscall" and the tests fail at their first wait.

// TestUDPListenerParksInNetpoller runs Nebula's UDP listener on loopback:
// idle, its reader is parked in the netpoller; a datagram is delivered and
// the reader parks again; Shutdown ends ListenOut with net.ErrClosed.
func TestUDPListenerParksInNetpoller(t *testing.T) {
	conn, err := udp.NewListener(slog.New(slog.DiscardHandler), udp.Settings{
		Listen: netip.MustParseAddrPort("127.0.0.1:0"), Batch: 64,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	local, err := conn.LocalAddr()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 4)
	done := make(chan error, 1)
	go func() {
		done <- conn.ListenOut(func(_ netip.AddrPort, p []byte) { got <- bytes.Clone(p) }, func() {})
	}()
	waitParked(t, "udp.(*StdConn).ListenOut")

	peer, err := net.Dial("udp4", local.String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	for i := range 2 {
		want := fmt.Appendf(nil, "datagram %d", i)
		if _, err := peer.Write(want); err != nil {
			t.Fatal(err)
		}
		select {
		case p := <-got:
			if !bytes.Equal(p, want) {
				t.Fatalf("read %q, want %q", p, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("datagram %d not delivered within 5s", i)
		}
		waitParked(t, "udp.(*StdConn).ListenOut")
	}

	if s, ok := conn.(interface{ Shutdown() error }); ok {
		_ = s.Shutdown()
	} else {
		t.Fatalf("%T has no Shutdown", conn)
	}
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("ListenOut after Shutdown: %v, want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ListenOut still running 5s after Shutdown")
	}
}

// TestTUNQueueParksInNetpoller runs a TUN queue without offloads (tio's
// Poll, the queue Nebula uses when the kernel refuses TUN offloads) on one
// end of a datagram socket pair, which reads and writes like a TUN: idle,
// its reader is parked in the netpoller; a packet is read and the reader
// parks again; the set's Shutdown ends a parked Read with os.ErrClosed.
// The offload queue (tio's Offload) is checked on a real TUN by
// TestKernelReadersParkInNetpoller.
func TestTUNQueueParksInNetpoller(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	qs, err := tio.NewPollQueueSet()
	if err != nil {
		t.Fatal(err)
	}
	if err := qs.Add(fds[0]); err != nil {
		t.Fatal(err)
	}
	defer qs.Close()
	q := qs.Queues()[0]

	type read struct {
		p   []byte
		err error
	}
	reads := make(chan read, 1)
	readOnce := func() {
		pkts, err := q.Read()
		if err != nil {
			reads <- read{err: err}
			return
		}
		reads <- read{p: bytes.Clone(pkts[0].Bytes)}
	}
	for i := range 2 {
		go readOnce()
		waitParked(t, "tio.(*Poll).Read")
		want := fmt.Appendf(nil, "packet %d", i)
		if _, err := unix.Write(fds[1], want); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-reads:
			if r.err != nil || !bytes.Equal(r.p, want) {
				t.Fatalf("read %q, %v; want %q", r.p, r.err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("packet %d not read within 5s", i)
		}
	}
	if n, err := q.Write([]byte("back")); err != nil || n != 4 {
		t.Fatalf("write: %d, %v", n, err)
	}

	go readOnce()
	waitParked(t, "tio.(*Poll).Read")
	if err := qs.Shutdown(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-reads:
		if !errors.Is(r.err, os.ErrClosed) {
			t.Errorf("Read after Shutdown: %q, %v; want os.ErrClosed", r.p, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read still parked 5s after Shutdown")
	}
}

// waitParked waits until every goroutine whose stack has fn in it is
// parked in the netpoller, and there is at least one; it fails with the
// states it saw.
func waitParked(t *testing.T, fn string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		states := goroutineStates(fn)
		parked := len(states) > 0
		for _, s := range states {
			parked = parked && strings.HasPrefix(s, "IO wait")
		}
		if parked {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines in %s: states %q, want all \"IO wait\" (parked in the netpoller) within 5s", fn, states)
		}
		time.Sleep(10 * time.Millisecond) // polling the goroutine dump, bounded by the deadline
	}
}

// goroutineStates is the state of each goroutine whose stack has fn in it
// ("IO wait", "syscall", "running", ...).
func goroutineStates(fn string) []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if !strings.Contains(g, fn) {
			continue
		}
		header, _, _ := strings.Cut(g, "\n")
		_, state, _ := strings.Cut(header, "[")
		state, _, _ = strings.Cut(state, "]")
		out = append(out, state)
	}
	return out
}

// TestKernelReadersParkInNetpoller starts a kernel-TUN instance with the
// offloads on (tio's Offload queue) in a fresh network namespace: idle, its
// TUN and UDP readers are parked in the netpoller; a packet into the TUN
// and a datagram onto its UDP port are read and both readers park again;
// Stop wakes them and ends (TestKernelTUN checks that it releases the
// device and the port). It needs root (see inNetns).
func TestKernelReadersParkInNetpoller(t *testing.T) {
	if !inNetns(t) {
		return
	}
	c := kernelConfig(t, "127.0.0.2:4242")
	m, err := Start(c, testLogger("kernel"))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			m.Stop()
		}
	}()
	readers := []string{"tio.(*Offload).Read", "udp.(*StdConn).ListenOut"}
	for _, fn := range readers {
		waitParked(t, fn)
	}

	// Into the TUN: a datagram to the peer's overlay address (no tunnel:
	// Nebula starts a handshake to 127.0.0.2:4242, which nobody answers).
	toPeer, err := net.Dial("udp4", overlayIP(2).Addr().String()+":9")
	if err != nil {
		t.Fatal(err)
	}
	defer toPeer.Close()
	// Onto the UDP port: a datagram that is no Nebula packet.
	toPort, err := net.Dial("udp4", "127.0.0.1:4242")
	if err != nil {
		t.Fatal(err)
	}
	defer toPort.Close()
	for i := range 3 {
		if _, err := toPeer.Write([]byte("to the peer")); err != nil {
			t.Fatal(err)
		}
		if _, err := toPort.Write([]byte("not nebula")); err != nil {
			t.Fatal(err)
		}
		for _, fn := range readers {
			waitParked(t, fn)
		}
		t.Logf("packet %d: readers parked again", i)
	}

	start := time.Now()
	m.Stop()
	stopped = true
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Stop took %s, want under 3s", took)
	}
	for _, fn := range readers {
		if states := goroutineStates(fn); len(states) > 0 {
			t.Errorf("%s still running after Stop: %q", fn, states)
		}
	}
}
