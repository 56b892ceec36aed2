package nebula

import "time"

// meshd patch 8 (PATCHES.md, "Tick for handshakes only while one is
// timed"): the handshake manager's ticker runs only while its timer wheel
// holds an item. Upstream ticks every handshakes.try_interval (100 ms) for
// the life of the process, handshakes or not: ten wakeups a second of an
// idle node, each of which also wakes the Go runtime's sysmon (meshd issue
// 54). The wheel counts its items, and the first added to an empty wheel
// wakes the manager's loop, which restarts the ticker.

// firstItem counts an item being added; the first one into an empty wheel
// brings the wheel's clock up to now in whole ticks (as a ticker would have
// advanced it, empty, meanwhile) and wakes Wake's reader. Called with lw.m
// held.
func (lw *LockingTimerWheel[T]) firstItem() {
	lw.items++
	if lw.items != 1 {
		return
	}
	tw := lw.t
	if tw.lastTick != nil {
		if n := time.Since(*tw.lastTick) / tw.tickDuration; n > 0 {
			t := tw.lastTick.Add(n * tw.tickDuration)
			tw.lastTick = &t
		}
	}
	select {
	case lw.wake <- struct{}{}:
	default:
	}
}

// Empty reports whether the wheel holds no item, pending or expired.
func (lw *LockingTimerWheel[T]) Empty() bool {
	lw.m.Lock()
	defer lw.m.Unlock()
	return lw.items == 0
}

// Wake is sent on when an item goes into an empty wheel.
func (lw *LockingTimerWheel[T]) Wake() <-chan struct{} {
	return lw.wake
}

// HandshakeTicking reports whether the handshake manager's ticker runs
// (meshd's test of patch 8).
func (c *Control) HandshakeTicking() bool {
	return c.f.handshakeManager.ticking.Load()
}
