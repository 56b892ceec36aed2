package preflight

import (
	"errors"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/netcheck"
)

// TestSeedProbe: what a seed's probe counts for in the join's path check,
// failing closed both ways. Only a seed that proved itself (no error) with
// its clock in bound counts as a TCP answer, and only a seed that says
// which STUN port it serves can make its silence over UDP count: a seed of
// a release without the responder (STUNPort 0) answers with no port, which
// netcheck reads as "not checked", so the join goes on.
func TestSeedProbe(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	skew := func(d time.Duration) enroll.Skew { return enroll.Skew{Peer: "seed s", Local: now, Remote: now.Add(d)} }
	for _, tc := range []struct {
		name string
		r    enroll.SeedReport
		want netcheck.TCPProbe
	}{
		{"serves", enroll.SeedReport{Skew: skew(time.Second), HasClock: true, STUNPort: 3478}, netcheck.TCPProbe{Answered: true, STUNPort: 3478}},
		{"older-release", enroll.SeedReport{Skew: skew(time.Second), HasClock: true}, netcheck.TCPProbe{Answered: true}},
		{"no-clock-older", enroll.SeedReport{}, netcheck.TCPProbe{Answered: true}},
		{"bad-port", enroll.SeedReport{HasClock: true, Skew: skew(0), STUNPort: 70000}, netcheck.TCPProbe{Answered: true}},
		{"impostor", enroll.SeedReport{Err: codes.Wrap(codes.CAMismatch, errors.New("other CA")), STUNPort: 3478}, netcheck.TCPProbe{}},
		{"unreachable", enroll.SeedReport{Err: codes.Wrap(codes.SeedsUnreachable, errors.New("refused"))}, netcheck.TCPProbe{}},
		{"clock-off", enroll.SeedReport{Skew: skew(10 * time.Minute), HasClock: true, STUNPort: 3478}, netcheck.TCPProbe{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SeedProbe(tc.r, 5*time.Minute); got != tc.want {
				t.Errorf("SeedProbe(%+v) = %+v, want %+v", tc.r, got, tc.want)
			}
		})
	}
}
