package enroll

import (
	"testing"
	"time"
)

// TestSeedDialerBounded: a seed that drops packets must cost seconds, not
// the system's TCP connect timeout (minutes), before the next seed is
// tried. A zero Timeout would mean no bound at all.
func TestSeedDialerBounded(t *testing.T) {
	if d := seedDialer().Timeout; d < time.Second || d > 10*time.Second {
		t.Fatalf("seed dial timeout %s, want 1s to 10s", d)
	}
	c := newClient(Token{}, ClientDeps{})
	if c.dial == nil || c.now == nil || c.step == nil || c.log == nil {
		t.Fatal("newClient left a default unset")
	}
	if c.handshake != DefaultHandshakeTimeout || DefaultHandshakeTimeout != 5*time.Second {
		t.Fatalf("handshake timeout %s by default, want %s (5s)", c.handshake, DefaultHandshakeTimeout)
	}
	for d, want := range map[time.Duration]time.Duration{time.Second: time.Second, -time.Second: DefaultHandshakeTimeout, time.Nanosecond: time.Nanosecond} {
		if got := newClient(Token{}, ClientDeps{HandshakeTimeout: d}).handshake; got != want {
			t.Errorf("HandshakeTimeout %s: %s, want %s", d, got, want)
		}
	}
}
