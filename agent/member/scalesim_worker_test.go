package member

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/mesh"
	"github.com/meshd/meshd/pki"
)

// The worker of the scale simulation: a real member.Runtime (Start, its
// state dir, every loop a worker runs), with userspace Nebula (gVisor's
// netstack, no TUN: a kernel TUN needs root and its own namespace), its
// gossip on that overlay, and its fetched copies following the simulated
// control node's watch stream over mTLS (scalesim_control_test.go).

// simWorker is the worker and what its loops read, counted.
type simWorker struct {
	rt    *Runtime
	reads *simCountedFacts
	port  int // its Nebula's UDP port
}

// simCountedFacts is a worker's fetched copies, counting the reads of the
// whole node list (Records) its loops make.
type simCountedFacts struct {
	clusterFacts
	records atomic.Uint64
}

func (c *simCountedFacts) Records() ([]control.NodeRecord, bool) {
	c.records.Add(1)
	return c.clusterFacts.Records()
}

// startSimWorker loads the table with n simulated peers and the worker
// "w1" (10.42.0.2), and starts the worker; it returns once the worker's
// Nebula holds every peer and gossip shows c1 alive.
func startSimWorker(tb testing.TB, ca *pki.CA, key []byte, sc simTable, n int, log *slog.Logger, opts ...func(*Options)) *simWorker {
	tb.Helper()
	ep := sc.endpoints()
	dir := tb.TempDir()
	overlay := netip.MustParsePrefix("10.42.0.2/16")
	id := simIdentity(tb, ca, "w1", pki.RoleWorker, overlay)
	if err := id.Save(filepath.Join(dir, statedir.IdentityDir)); err != nil {
		tb.Fatal(err)
	}
	cfg := config.Default()
	cfg.StateDir, cfg.BindAddr, cfg.OverlayMode = dir, "127.0.0.1", config.OverlayUserspace
	cfg.Ports.Nebula, cfg.Ports.STUN = simFreeUDPPort(tb), ep.STUNPort
	cfg.DNS.Enabled = false
	facts := &statedir.Facts{Version: 1, NodeID: "id-w1", Name: "w1", Role: pki.RoleWorker, ClusterID: "sim", ClusterName: "sim",
		Overlay: overlay, Underlay: netip.MustParseAddr("127.0.0.1"), Seeds: []string{ep.Addr}, HomeSeed: ep.Addr,
		SerfPeers:   []string{"10.42.0.1:" + strconv.Itoa(cfg.Ports.Gossip)},
		Lighthouses: []enroll.Lighthouse{{OverlayIP: netip.MustParseAddr("10.42.0.1"), Underlay: "127.0.0.1:" + strconv.Itoa(ep.LHPort)}},
		GossipKeys:  [][]byte{key}, Joined: time.Now()}
	recs := map[string]json.RawMessage{"id-w1": simRecord{Name: "w1", State: "active", OverlayIP: "10.42.0.2", Underlay: "127.0.0.1",
		NebulaPort: cfg.Ports.Nebula}.raw()}
	for i := range n {
		id, r := simPeer(i, 4242)
		recs[id] = r
	}
	sc.load(recs)

	w := &simWorker{port: cfg.Ports.Nebula}
	o := Options{Config: cfg, Facts: facts, Policy: cfg.Policy(), Version: "sim", Log: log.With("node", "w1"),
		Now: time.Now, testOnlyWrapCluster: func(c clusterFacts) clusterFacts { w.reads = &simCountedFacts{clusterFacts: c}; return w.reads }}
	for _, set := range opts {
		set(&o)
	}
	rt, err := Start(context.Background(), o)
	if err != nil {
		tb.Fatalf("start the worker: %v", err)
	}
	w.rt = rt
	tb.Cleanup(rt.Stop)
	// Its liveness source: gossip in the pool, its node list out of it
	// (the default, gossip_pool: false).
	w.await(tb, 120*time.Second, "its Nebula holds every simulated peer and its liveness shows c1 alive", func() bool {
		return len(rt.ov.applied().StaticHosts) == n && slices.ContainsFunc(rt.peers().Members(), func(m gossip.Member) bool {
			return m.Name == "c1" && m.Status == gossip.StatusAlive
		})
	})
	return w
}

// await waits until cond holds, looking again whenever the worker's
// overlay applied a config or its tunnels or gossip changed (pathWake),
// and at least every 50 ms; it fails past bound.
func (w *simWorker) await(tb testing.TB, bound time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.NewTimer(bound)
	defer deadline.Stop()
	for {
		wake := w.rt.pathWake.wait()
		if cond() {
			return
		}
		select {
		case <-wake:
		case <-time.After(50 * time.Millisecond): // a safety net: not every fact cond reads rings the bell
		case <-deadline.C:
			tb.Fatalf("the simulated worker: %s: not within %s", what, bound)
		}
	}
}

// simLog is the worker's and the control node's log: info, as meshd
// runs, written nowhere (its cost is the worker's; its lines are noise
// here).
func simLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// newSimCluster is a CA and a gossip key for the simulation.
func newSimCluster(tb testing.TB) (*pki.CA, []byte) {
	tb.Helper()
	ca, err := pki.NewCA("sim", netip.MustParsePrefix("10.42.0.0/16"), time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		tb.Fatal(err)
	}
	return ca, key
}

// simProcessCPU is this process's CPU so far (user and system).
func simProcessCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// simThreadCPU is the calling thread's CPU so far (user and system):
// the benchmark's own, with its goroutine locked to its thread.
func simThreadCPU(tb testing.TB) time.Duration {
	const rusageThread = 1 // RUSAGE_THREAD (Linux)
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// simContextSwitches are the context switches of this process's threads so
// far, voluntary and not (each is a wakeup), as e2e's idle benchmarks
// count them: a thread that ended takes its count with it.
func simContextSwitches(tb testing.TB) uint64 {
	tb.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		tb.Fatal(err)
	}
	var sum uint64
	for _, t := range tasks {
		f, err := os.Open(filepath.Join("/proc/self/task", t.Name(), "status"))
		if err != nil {
			continue // the thread ended
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if ok && (k == "voluntary_ctxt_switches" || k == "nonvoluntary_ctxt_switches") {
				n, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				sum += n
			}
		}
		_ = f.Close()
	}
	return sum
}

// simLooks is what the worker's per-peer paths did over a window.
type simLooks struct {
	records uint64           // reads of the whole node list
	members uint64           // copies of every gossip member (Members, Statuses)
	tunnels mesh.TunnelLooks // tunnel listings, and scans of every known peer
}

func (w *simWorker) looks() simLooks {
	return simLooks{records: w.reads.records.Load(), members: w.memberCopies(), tunnels: w.rt.mesh.TunnelLooks()}
}

// memberCopies counts the copies of every member its liveness source
// made: gossip's in the pool, the node list's out of it (the default).
func (w *simWorker) memberCopies() uint64 {
	if w.rt.gossip != nil {
		return w.rt.gossip.Copies()
	}
	if l, ok := w.rt.peers().(*recordLiveness); ok {
		return l.copies.Load()
	}
	return 0
}

func (a simLooks) since(b simLooks) simLooks {
	return simLooks{records: a.records - b.records, members: a.members - b.members,
		tunnels: mesh.TunnelLooks{Lists: a.tunnels.Lists - b.tunnels.Lists, Scans: a.tunnels.Scans - b.tunnels.Scans}}
}
