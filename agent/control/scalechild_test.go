package control

import (
	"context"
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/childtest"
	"github.com/meshd/meshd/pki"
)

// BenchmarkWatchScale's watchers run in a child process: this test
// binary again, running TestWatchScaleChild with watchChildEnv naming
// the spec (childtest). The two talk in lines: the child says "ready" once every
// stream brought its first line; told "mark", it notes the bytes read so
// far and says "marked", then "seen" with when each watcher saw the
// victim's removal; told "bytes", it says how many it read since the
// mark. Its stdin closing ends it.
const watchChildEnv = "MESHD_WATCH_CHILD"

type watchChildSpec struct {
	Addrs    []string
	Since    uint64
	CA       []byte
	Victim   string
	Watchers []watchChildID
}

type watchChildID struct {
	ID        string
	Cert, Key []byte
}

type watchChildSeen struct {
	At []int64 // Unix nanoseconds, one per watcher
}

// startWatchChild writes spec to a file and starts TestWatchScaleChild
// on it.
func startWatchChild(tb testing.TB, spec watchChildSpec) *childtest.Child {
	tb.Helper()
	return childtest.StartSpec(tb, "TestWatchScaleChild", watchChildEnv, spec)
}

// TestWatchScaleChild is BenchmarkWatchScale's watchers (skipped unless
// the benchmark started it).
func TestWatchScaleChild(t *testing.T) {
	var spec watchChildSpec
	if ok, err := childtest.Spec(watchChildEnv, &spec); !ok {
		t.Skip("BenchmarkWatchScale's child process")
	} else if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ws := make([]*scaleWatcher, len(spec.Watchers))
	sem := make(chan struct{}, 64)
	var running sync.WaitGroup
	defer running.Wait()
	defer cancel()
	for i, id := range spec.Watchers {
		cl, err := NewClient(&pki.Identity{CACert: spec.CA, Cert: id.Cert, Key: id.Key})
		if err != nil {
			t.Fatal(err)
		}
		w := &scaleWatcher{id: id.ID, client: cl, heard: make(chan struct{}), saw: map[string]time.Time{}}
		d := &net.Dialer{Timeout: 30 * time.Second}
		cl.Dial(func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return countConn{conn, &w.read}, nil
		})
		ws[i] = w
		sem <- struct{}{}
		running.Go(func() { w.run(ctx, spec.Addrs[i%len(spec.Addrs)], spec.Since) })
		go func() {
			select {
			case <-w.heard:
			case <-time.After(60 * time.Second):
			}
			<-sem
		}()
	}
	for _, w := range ws {
		select {
		case <-w.heard:
		case <-time.After(90 * time.Second):
			_, _, err := w.sawAt("")
			t.Fatalf("child: watcher %s heard nothing within 90s (%v)", w.id, err)
		}
	}
	childtest.Say("ready")
	total := func() int64 {
		var n int64
		for _, w := range ws {
			n += w.read.Load()
		}
		return n
	}
	var mark int64
	for cmd := range childtest.Commands() {
		switch cmd {
		case "mark":
			mark = total()
			childtest.Say("marked")
			go func() {
				var seen watchChildSeen
				deadline := time.Now().Add(50 * time.Second)
				for _, w := range ws {
					for {
						at, ok, err := w.sawAt(spec.Victim)
						if ok {
							seen.At = append(seen.At, at.UnixNano())
							break
						}
						if err != nil || time.Now().After(deadline) {
							childtest.Say("child: watcher %s did not see the removal (%v)", w.id, err)
							childtest.Say("seen {}")
							return
						}
						time.Sleep(10 * time.Millisecond) // polling what the watchers stamped
					}
				}
				b, _ := json.Marshal(seen)
				childtest.Say("seen %s", b)
			}()
		case "bytes":
			childtest.Say("bytes %d", total()-mark)
		}
	}
}
