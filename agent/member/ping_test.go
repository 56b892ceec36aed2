package member

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
)

// TestProbeOutcome: a reset or an accept is an answer; a timeout and a
// local failure (no route to a stopped peer) are lost probes with their
// reason, never an error of the call, so meshctl always prints its
// summary (issue 25: TestOverlayFirewall once got PingLost with no
// summary when a dial to a stopped node failed with EHOSTUNREACH).
func TestProbeOutcome(t *testing.T) {
	dialErr := func(errno syscall.Errno) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: errno}}
	}
	for _, tc := range []struct {
		name     string
		err      error
		timedOut bool
		answered bool
		answer   string
		lost     string
	}{
		{"answer/accepted", nil, false, true, "accepted", ""},
		{"answer/refused", dialErr(syscall.ECONNREFUSED), false, true, "refused", ""},
		{"answer/refused-userspace", errors.New("connect tcp 10.42.0.3:7946: connection was refused"), false, true, "refused", ""},
		{"lost/timeout", context.DeadlineExceeded, true, false, "", "timeout"},
		{"lost/no-route", dialErr(syscall.EHOSTUNREACH), false, false, "", "no route to host"},
		{"lost/net-unreachable", dialErr(syscall.ENETUNREACH), false, false, "", "network is unreachable"},
		{"lost/other", errors.New("dial tcp 10.42.0.3:7946: something odd"), false, false, "", "something odd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answered, answer, lost := probeOutcome(tc.err, tc.timedOut)
			if answered != tc.answered || answer != tc.answer || lost != tc.lost {
				t.Errorf("probeOutcome(%v, %t) = %t %q %q, want %t %q %q", tc.err, tc.timedOut,
					answered, answer, lost, tc.answered, tc.answer, tc.lost)
			}
		})
	}
}
