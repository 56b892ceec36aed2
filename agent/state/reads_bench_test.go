package state

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/meshd/meshd/pki"
)

// recordsFSM is an FSM holding n active worker records besides the
// origin's, each with byte slices the size of real ones (a TLS leaf of
// about 900 bytes of PEM, a Nebula certificate of about 600, the keys,
// two retired fingerprints): a rebuild copies what a control node's
// would. The records are put in place directly: admitting 10,000 through
// Apply would take the benchmark longer than what it measures.
func recordsFSM(b *testing.B, n int) (f *FSM, ids, names []string) {
	b.Helper()
	f = bootstrapped(b)
	f.mu.Lock()
	defer f.mu.Unlock()
	base := netip.MustParseAddr("10.42.0.10")
	for i := range n {
		id, name := fmt.Sprintf("id%05d", i), fmt.Sprintf("w%05d", i)
		ip := base
		for range i {
			ip = ip.Next()
		}
		f.s.Nodes[id] = Node{ID: id, Name: name, Role: pki.RoleWorker, State: NodeActive, Underlay: "198.51.100.9",
			SerfAddr: "198.51.100.9:7946", NebulaPort: 4242, OverlayIP: ip,
			TLSFingerprint: fmt.Sprintf("%064x", i), NebulaFingerprint: fmt.Sprintf("%064x", i+n),
			TLSCert: bytes.Repeat([]byte("t"), 900), NebulaCert: bytes.Repeat([]byte("n"), 600),
			NebulaPublicKey: bytes.Repeat([]byte("k"), 120), TLSPublicKey: bytes.Repeat([]byte("p"), 91),
			Retired: []string{fmt.Sprintf("%064x", i+2*n), fmt.Sprintf("%064x", i+3*n)},
			Created: t0, Updated: t0, Version: "0.2.0"}
		f.s.IPAM[ip] = id
		ids, names = append(ids, id), append(names, name)
	}
	return f, ids, names
}

// BenchmarkFSMReads is what a control node's readers pay per read of the
// node records at 1,000 and 10,000 records (issue 54 item 2): Nodes and
// View (the whole sorted list, as the overlay, DNS, sweeps and the watch
// table read it), Node (by id: every caller check of port 7300) and
// NodeByName (a tunnel report's peers, a removal), each between two
// changes; and write+Nodes, one applied command and the first read after
// it, which builds the list again.
//
//	go test -run '^$' -bench BenchmarkFSMReads -benchmem ./agent/state
func BenchmarkFSMReads(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		f, ids, names := recordsFSM(b, n)
		if got := len(f.Nodes()); got != n+1 {
			b.Fatalf("%d records, want %d", got, n+1)
		}
		b.Run(fmt.Sprintf("N=%d/Nodes", n), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				_ = f.Nodes()
			}
		})
		b.Run(fmt.Sprintf("N=%d/View", n), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				_ = f.View()
			}
		})
		b.Run(fmt.Sprintf("N=%d/Node", n), func(b *testing.B) {
			b.ReportAllocs()
			_ = f.Nodes() // between two changes: the list is built
			i := 0
			for range b.N {
				if _, ok := f.Node(ids[i]); !ok {
					b.Fatal("no record")
				}
				i = (i + 1) % len(ids)
			}
		})
		b.Run(fmt.Sprintf("N=%d/NodeByName", n), func(b *testing.B) {
			b.ReportAllocs()
			_ = f.Nodes()
			i := 0
			for range b.N {
				if _, ok := f.NodeByName(names[i]); !ok {
					b.Fatal("no record")
				}
				i = (i + 1) % len(names)
			}
		})
		b.Run(fmt.Sprintf("N=%d/write+Nodes", n), func(b *testing.B) {
			b.ReportAllocs()
			relay := false
			for i := range b.N {
				relay = !relay
				data, err := Encode(SetRelay{NodeID: ids[0], Relay: relay, At: t0.Add(time.Duration(i) * time.Second)})
				if err != nil {
					b.Fatal(err)
				}
				if err, _ := f.Apply(&raft.Log{Index: uint64(i + 2), Data: data}).(error); err != nil {
					b.Fatal(err)
				}
				_ = f.Nodes()
			}
		})
	}
}
