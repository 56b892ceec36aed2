package mesh

import (
	"errors"
	"testing"
	"time"

	"github.com/slackhq/nebula/overlay"
)

// TestRouteRaceRetries (Nebula patch 6): the own route's MTU, refused
// four times ("invalid argument", the race upstream's comment names), is
// set at the fifth try (upstream gave up after the third and Control.Start
// closed the device); one always refused returns its error after about
// 3 s of waits, each refusal warned.
func TestRouteRaceRetries(t *testing.T) {
	einval := errors.New("invalid argument")
	waits := overlay.RouteRaceWaits()
	tries, slept, warned := 0, time.Duration(0), 0
	sleep := func(d time.Duration) { slept += d }
	warn := func(error) { warned++ }
	err := overlay.RetryRouteRace(func() error {
		tries++
		if tries < 5 {
			return einval
		}
		return nil
	}, waits, sleep, warn)
	if err != nil || tries != 5 || warned != 4 {
		t.Fatalf("refused 4 times: err %v, %d tries, %d warned; want nil, 5, 4", err, tries, warned)
	}
	tries, slept, warned = 0, 0, 0
	err = overlay.RetryRouteRace(func() error { tries++; return einval }, waits, sleep, warn)
	if !errors.Is(err, einval) || tries != len(waits)+1 || warned != len(waits) || slept < 3*time.Second {
		t.Fatalf("always refused: err %v, %d tries, %d warned, slept %s; want invalid argument, %d, %d, >= 3s",
			err, tries, warned, slept, len(waits)+1, len(waits))
	}
}
