package mesh

import (
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"
)

// BenchmarkReloadOneChange: one membership change (a peer added to the
// static hosts) applied by Reload on an instance holding hosts static
// hosts, a worker's and a lighthouse's (a control node's: Verify reads
// every static host back there): Apply of the change (Nebula patch 5),
// Reload of the whole next config (compared with the applied one, then
// the same delta), and, for comparison, the full reload Reload did before
// patch 5. Run with a fixed -benchtime (e.g. 20x): each op adds a peer,
// so the host count grows by the op count.
func BenchmarkReloadOneChange(b *testing.B) {
	for _, path := range []string{"apply", "delta", "full"} {
		for _, role := range []string{"worker", "lighthouse"} {
			for _, hosts := range []int{1000, 10000} {
				b.Run(fmt.Sprintf("path=%s/role=%s/hosts=%d", path, role, hosts), func(b *testing.B) {
					benchReload(b, role == "lighthouse", hosts, path)
				})
			}
		}
	}
}

func benchReload(b *testing.B, lighthouse bool, hosts int, path string) {
	ca := testCA(b)
	crt, key := hostCert(b, ca, "n", 1)
	c := userspaceConfig(ca, crt, key)
	c.StaticHosts = make(map[netip.Addr][]netip.AddrPort, hosts+b.N)
	for i := range hosts {
		c.StaticHosts[benchPeer(i)] = []netip.AddrPort{netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), 4242)}
	}
	var m *Mesh
	if lighthouse {
		m, c.ListenPort = startLighthouse(b, c, testLogger("n"))
		c.AmLighthouse = true
	} else {
		var err error
		if m, err = Start(c, testLogger("n")); err != nil {
			b.Fatal(err)
		}
	}
	m.testOnlyFullReload = path == "full"
	b.ReportAllocs()
	i := hosts
	cpu := processCPU()
	for b.Loop() {
		peer, underlay := benchPeer(i), []netip.AddrPort{netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), 4242)}
		i++
		var err error
		if path == "apply" {
			err = m.Apply(Change{StaticHosts: map[netip.Addr][]netip.AddrPort{peer: underlay}})
		} else {
			c.StaticHosts[peer] = underlay
			err = m.Reload(c)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	// ns/op is wall time, which a shared box stretches; this is the CPU
	// the process spent per change (Reload, the garbage collector, and
	// whatever the idle instance did meanwhile).
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
}

// processCPU is the CPU time this process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchPeer is the overlay address of the benchmark's i-th peer,
// 10.42.1.1 on (never the instance's own, 10.42.0.1).
func benchPeer(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 42, byte(1 + i/250), byte(1 + i%250)})
}

// BenchmarkReloadOneRemoval: one membership change of the other kind, a
// peer removed from the static hosts and its certificate blocked, on a
// worker holding hosts static hosts, by Apply and by Reload (the full
// reload's cost does not depend on the change: BenchmarkReloadOneChange).
// Each op removes another peer; run with a fixed -benchtime below hosts.
func BenchmarkReloadOneRemoval(b *testing.B) {
	for _, path := range []string{"apply", "delta"} {
		for _, hosts := range []int{1000, 10000} {
			b.Run(fmt.Sprintf("path=%s/hosts=%d", path, hosts), func(b *testing.B) {
				ca := testCA(b)
				crt, key := hostCert(b, ca, "n", 1)
				c := userspaceConfig(ca, crt, key)
				c.StaticHosts = make(map[netip.Addr][]netip.AddrPort, hosts)
				for i := range hosts {
					c.StaticHosts[benchPeer(i)] = []netip.AddrPort{netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), 4242)}
				}
				m, err := Start(c, testLogger("n"))
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				i := 0
				cpu := processCPU()
				for b.Loop() {
					peer, fp := benchPeer(i), fmt.Sprintf("%064x", i+1)
					i++
					if path == "apply" {
						err = m.Apply(Change{StaticHosts: map[netip.Addr][]netip.AddrPort{peer: nil}, Block: []string{fp}})
					} else {
						delete(c.StaticHosts, peer)
						c.Blocklist = append(c.Blocklist, fp)
						err = m.Reload(c)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
