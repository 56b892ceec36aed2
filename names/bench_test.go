package names

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshd/meshd/persource"
)

// benchHosts are n hosts, as a dual-stack cluster of n nodes gives them
// (overlay6's addresses).
func benchHosts(n int) []Host {
	hosts := make([]Host, n)
	for i := range hosts {
		a6 := overlay6.Addr().As16()
		a6[14], a6[15] = byte(i>>8), byte(i)
		hosts[i] = Host{Name: fmt.Sprintf("n%d", i), Addr: netip.AddrFrom4([4]byte{10, 42, byte(i >> 8), byte(i)}), Addr6: netip.AddrFrom16(a6)}
	}
	return hosts
}

// benchZone is a zone of n hosts, as a dual-stack cluster of n nodes gives it.
func benchZone(b *testing.B, n int) *Zone {
	z, err := NewZone("prod", "mesh", netip.MustParsePrefix("10.42.0.0/16"), overlay6, benchHosts(n))
	if err != nil {
		b.Fatal(err)
	}
	if z.Len() != n {
		b.Fatalf("zone of %d hosts, want %d", z.Len(), n)
	}
	return z
}

// BenchmarkServeLatency: one client asks a server on loopback UDP for a
// member's A, one query in flight at a time, in a zone of 1000 hosts;
// reports the answer latency's p50 and p99 as the client sees it (the
// kernel's loopback both ways included). `make bench` runs it with
// -cpu 1: target p99 < 1 ms.
func BenchmarkServeLatency(b *testing.B) {
	s, addr := serve(b, Limits{Source: persource.Limits{PerSource: 1 << 30}})
	s.SetZone(benchZone(b, 1000))
	conn, err := net.Dial("udp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	q, _ := query("n500.prod.mesh.", dns.TypeA).Pack()
	buf := make([]byte, 1500)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if _, err := conn.Write(q); err != nil {
			b.Fatal(err)
		}
		_ = conn.SetReadDeadline(start.Add(2 * time.Second))
		if _, err := conn.Read(buf); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkServeThroughput: 8 clients on loopback UDP, each with one
// query in flight, against one server; reports answered queries per
// second. `make bench` runs it with -cpu 1: queries a second on one core.
func BenchmarkServeThroughput(b *testing.B) {
	s, addr := serve(b, Limits{Source: persource.Limits{PerSource: 1 << 30}})
	s.SetZone(benchZone(b, 1000))
	q, _ := query("n500.prod.mesh.", dns.TypeA).Pack()
	const clients = 8
	var wg sync.WaitGroup
	per := b.N/clients + 1
	start := time.Now()
	for range clients {
		conn, err := net.Dial("udp", addr)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		wg.Go(func() {
			buf := make([]byte, 1500)
			for range per {
				if _, err := conn.Write(q); err != nil {
					b.Error(err)
					return
				}
				_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
				if _, err := conn.Read(buf); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(per*clients)/time.Since(start).Seconds(), "queries/s")
}

// BenchmarkZoneBuild: building a 1000-host dual-stack zone, what every
// change of the records costs a node.
func BenchmarkZoneBuild(b *testing.B) {
	hosts := benchHosts(1000)
	b.ReportAllocs()
	for range b.N {
		if _, err := NewZone("prod", "mesh", netip.MustParsePrefix("10.42.0.0/16"), overlay6, hosts); err != nil {
			b.Fatal(err)
		}
	}
}
