package control

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/watch"
	"github.com/meshd/meshd/codes"
)

// TestOneWorkerFloodsAnotherReads: over the internal API (real mTLS),
// one worker floods each gated call well past its own bound from the
// same network as another worker, whose calls all pass meanwhile; the
// flood is answered ControlBusy, the strict watch included. Fails on
// 8b0a8d4: the flood spent the one budget every caller shared (the
// other worker's node list and report were refused ControlBusy), and the
// strict watch was not gated at all.
func TestOneWorkerFloodsAnotherReads(t *testing.T) {
	const victimCalls = 3 // at once: within every call's burst for one caller (gates.go)
	c, origin := newCluster(t)
	_, w1 := c.worker(t, origin, "w1")
	_, w2 := c.worker(t, origin, "w2")
	calls := []struct {
		name string
		call func(ctx context.Context, cl *Client) error
	}{
		{"node list", func(ctx context.Context, cl *Client) error {
			return cl.Call(ctx, origin.addr, PathNodes, false, nil, nil)
		}},
		{"strict change", func(ctx context.Context, cl *Client) error {
			var ch watch.Change
			return cl.Call(ctx, origin.addr, PathWatch+"?index=0&strict=1", false, nil, &ch)
		}},
		{"tunnel report", func(ctx context.Context, cl *Client) error {
			return cl.Call(ctx, origin.addr, PathSelfTunnels, false, TunnelsRequest{}, nil)
		}},
	}
	for _, cs := range calls {
		t.Run(cs.name, func(t *testing.T) {
			ctx := within(t, 30*time.Second)
			flood, stop := context.WithCancel(ctx)
			var busy, other atomic.Int64
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for flood.Err() == nil {
						switch err := cs.call(flood, w1); {
						case codes.Of(err) == codes.ControlBusy:
							busy.Add(1)
						case err != nil && flood.Err() == nil:
							other.Add(1)
						}
					}
				})
			}
			defer wg.Wait()
			defer stop()
			// Well past its own bound: hundreds refused.
			waitFor(t, 20*time.Second, "w1's flood to be refused 300 times", func() bool { return busy.Load() >= 300 })
			for i := range victimCalls {
				if err := cs.call(ctx, w2); err != nil {
					t.Fatalf("w2's %s %d of %d while w1 floods (%d refused): %v", cs.name, i+1, victimCalls, busy.Load(), err)
				}
			}
			stop()
			wg.Wait()
			if n := other.Load(); n > 0 {
				t.Errorf("%d of w1's calls failed otherwise than ControlBusy", n)
			}
		})
	}
}
