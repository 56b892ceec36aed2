package member

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"
)

// TestWaitAnyTunnel: a join confirms with the first lighthouse that has
// a tunnel, not the lowest one (down but on record, out of the pool),
// and stops waiting on the others; with none up by the deadline it
// returns the first lighthouse's error.
func TestWaitAnyTunnel(t *testing.T) {
	dead, up := netip.MustParseAddr("10.42.0.1"), netip.MustParseAddr("10.42.0.2")
	errDead := errors.New("no tunnel to 10.42.0.1")
	stopped := make(chan struct{})
	wait := func(ctx context.Context, ip netip.Addr) error {
		if ip == up {
			return nil
		}
		<-ctx.Done() // the dead one never answers: its wait ends when the join's does
		close(stopped)
		return errDead
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got, err := waitAnyTunnel(ctx, []netip.Addr{dead, up}, wait)
	if err != nil || got != up {
		t.Fatalf("waitAnyTunnel: %v %v, want %v", got, err, up)
	}
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("the wait on the dead lighthouse went on after the tunnel to another was up")
	}

	short, cancel2 := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel2()
	never := func(ctx context.Context, ip netip.Addr) error {
		<-ctx.Done()
		if ip == dead {
			return errDead
		}
		return errors.New("no tunnel to " + ip.String())
	}
	if _, err := waitAnyTunnel(short, []netip.Addr{dead, up}, never); !errors.Is(err, errDead) {
		t.Fatalf("none up: %v, want the first lighthouse's error", err)
	}
}
