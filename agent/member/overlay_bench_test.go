package member

import (
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/agent/desired"
	"github.com/meshd/meshd/agent/fetched"
	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/mesh"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// BenchmarkOverlayOneChange is a worker's whole share of one membership
// change once its inputs are read (issue 54 item 2): the overlay loop's
// pass (reconcileOverlay) on a running userspace Nebula holding n peers,
// for a peer moved, a peer added, and a peer removed with its
// certificate blocked. path=apply is the pass as it is (desired.Tracker,
// then Mesh.Apply: overlaydelta.go); path=whole is the pass before
// (Compute over every record, a comparison of the whole config, then
// Mesh.Reload's compare-and-delta). Reading the inputs (overlayInputs:
// every record and gossip member copied) is not in it. cpu-ns/op is the
// process's CPU per change (the idle instance and the garbage collector
// included), which the shared box stretches less than ns/op.
func BenchmarkOverlayOneChange(b *testing.B) {
	for _, path := range []string{"apply", "whole"} {
		for _, kind := range []string{"moved", "added", "removed"} {
			for _, n := range []int{1000, 10000} {
				b.Run(fmt.Sprintf("path=%s/change=%s/members=%d", path, kind, n), func(b *testing.B) {
					benchOverlay(b, path, kind, n)
				})
			}
		}
	}
}

func benchOverlay(b *testing.B, path, kind string, n int) {
	ov, in := testWorker(b, n)
	if ov.reconcileOverlay(in); !ov.tracking {
		b.Fatal("the first pass did not start the tracker")
	}
	// Two inputs, the change made in one of them; passes alternate
	// between them (each a slice of its own, as overlayInputs reads
	// them), so nothing is copied in the timed loop and every pass
	// applies one change: moved there and back, added then removed,
	// removed and blocked then back and unblocked.
	var pair [2]desired.Inputs
	pair[0], pair[1] = in, in
	pair[0].Records, pair[1].Records = slices.Clone(in.Records), slices.Clone(in.Records)
	switch kind {
	case "moved":
		pair[1].Records[n/2].Underlay = netip.MustParseAddrPort("198.51.100.1:4242")
	case "added":
		pair[1].Records = append(pair[1].Records, benchRecord(n))
	case "removed":
		pair[1].Records = pair[1].Records[:n-1]
		pair[1].Blocklist = []string{fmt.Sprintf("%064x", n)} // its certificate, as the revocation list gives it
	}
	b.ReportAllocs()
	cpu := processCPU()
	i := 1 // pair[0] is what the first pass applied
	for b.Loop() {
		in = pair[i%2]
		i++
		ov.lastReload = time.Time{} // no gap: every pass applies
		if path == "apply" {
			ov.reconcileOverlay(in)
			if !ov.tracking {
				b.Fatal("the change took the whole-config path")
			}
		} else {
			wholePass(b, ov, in)
		}
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	if err, _ := ov.overlayErr.Load().(errBox); err.err != nil {
		b.Fatal(err.err)
	}
}

// wholePass is reconcileOverlay as it was before the tracker.
func wholePass(b *testing.B, ov *overlay, in desired.Inputs) {
	want := ov.meshConfigFor(in)
	if reflect.DeepEqual(want, ov.applied()) {
		b.Fatal("the change changed nothing")
	}
	if err := ov.mesh.Reload(want); err != nil {
		b.Fatal(err)
	}
	ov.appliedMu.Lock()
	ov.meshApplied = want
	ov.appliedMu.Unlock()
	ov.applyRouting(in, want)
}

// testWorker is a worker's overlay, its userspace Nebula started with
// the config of a cluster of 3 control nodes and n-3 workers, and its
// inputs.
func testWorker(b testing.TB, n int) (*overlay, desired.Inputs) {
	ca := pkitest.NewCA(b, "bench")
	self := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 42, 255, 254}), pkitest.Overlay.Bits())
	id := pkitest.NewIdentity(b, ca, "self", pki.RoleWorker, self)
	live, err := pki.NewLiveIdentity(id)
	if err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	base := mesh.DefaultConfig()
	base.ListenHost, base.ListenPort = "127.0.0.1", 0
	base.Userspace, base.Fast = true, true
	base.LocalAllowList = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	nd := &node{log: log, live: live, standing: fetched.NewStanding(time.Now, log), subnets: &subnets{applied: make(chan struct{})}}
	ov := &overlay{node: nd, meshBase: base, inForce: config.Policy{Inbound: base.Inbound, Outbound: base.Outbound, MTU: base.MTU}}
	in := desired.Inputs{SelfName: "self", SelfOverlay: self.Addr(), RecordsKnown: true}
	for i := range n {
		r := benchRecord(i)
		in.Records = append(in.Records, r)
		in.Members = append(in.Members, desired.Member{ID: r.ID, Name: r.Name, Role: r.Role, Overlay: r.Overlay, Addr: r.Overlay, Status: gossip.StatusAlive})
	}
	c := ov.meshConfigFor(in)
	m, err := mesh.Start(c, log)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Stop() })
	nd.mesh, ov.meshApplied = m, c
	return ov, in
}

// benchRecord is the i-th record: 3 control nodes, then workers.
func benchRecord(i int) desired.Record {
	name, role := fmt.Sprintf("w%05d", i), pki.RoleWorker
	if i < 3 {
		name, role = fmt.Sprintf("c%d", i+1), pki.RoleControl
	}
	return desired.Record{ID: "id-" + name, Name: name, Role: role, Overlay: netip.AddrFrom4([4]byte{10, 42, byte(1 + i/250), byte(1 + i%250)}),
		Underlay: netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, byte(i >> 8), byte(i)}), 4242)}
}

// processCPU is the CPU time this process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
