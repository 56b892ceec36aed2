package desired

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/pki"
)

// BenchmarkComputeOneChange is a worker's share of one membership change
// that is not Nebula's (issue 54 item 2): Compute over n records and
// members, and the comparison of the result with what runs
// (agent/member/overlay.go reconcileOverlay's reflect.DeepEqual), per
// change. mesh.BenchmarkReloadOneChange has Nebula's share. Both grow with
// n: the end-to-end figure per change at 10,000 was their sum. The agent
// now keeps a Tracker instead (BenchmarkTrackerOneChange, and
// agent/member.BenchmarkOverlayOneChange end to end).
func BenchmarkComputeOneChange(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			in := fleet(n)
			before := Compute(in)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				in.Records[n-1].Underlay = netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, byte(i >> 8), byte(i)}), 4242) // one peer moved
				after := Compute(in)
				if reflect.DeepEqual(after.StaticHosts, before.StaticHosts) {
					b.Fatal("the change changed nothing")
				}
				before = after
			}
		})
	}
}

// fleet is a worker's inputs in a cluster of 3 control nodes and n-3
// workers, all alive.
func fleet(n int) Inputs {
	in := Inputs{SelfName: "w0003", SelfOverlay: netip.AddrFrom4([4]byte{10, 42, 0, 3}), RecordsKnown: true}
	for i := range n {
		name, role := fmt.Sprintf("w%04d", i), pki.RoleWorker
		if i < 3 {
			name, role = fmt.Sprintf("c%d", i+1), pki.RoleControl
		}
		ov := netip.AddrFrom4([4]byte{10, 42, byte(i >> 8), byte(i)})
		under := netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, byte(i >> 8), byte(i)}), 4242)
		in.Records = append(in.Records, Record{ID: "id-" + name, Name: name, Role: role, Overlay: ov, Underlay: under})
		in.Members = append(in.Members, Member{ID: "id-" + name, Name: name, Role: role, Overlay: ov, Addr: ov, Status: gossip.StatusAlive})
	}
	return in
}

// BenchmarkTrackerOneChange is what replaced Compute and the comparison
// per change: Tracker.Update and Routes after one peer moved. The inputs
// alternate between two copies of the records, one with the peer moved
// (a fresh slice each time, as the agent reads them, with nothing copied
// in the timed loop).
func BenchmarkTrackerOneChange(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			in := fleet(n)
			var t Tracker
			if !t.Reset(in) {
				b.Fatal("Reset refused the fleet")
			}
			pair := [2][]Record{slices.Clone(in.Records), slices.Clone(in.Records)}
			pair[1][n/2].Underlay = netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, 100, 1}), 4242)
			b.ReportAllocs()
			i := 1 // pair[0] is what Reset took
			for b.Loop() {
				in.Records = pair[i%2]
				i++
				ch, ok := t.Update(in)
				if !ok || len(ch.StaticHosts) != 1 {
					b.Fatalf("Update: %v, %+v", ok, ch)
				}
				_ = t.Routes(in)
			}
		})
	}
}
