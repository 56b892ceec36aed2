//go:build e2e

package e2e

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshd/meshd/agent/apitype"
)

const (
	// dnsQueries is how many queries one iteration of BenchmarkDNSAnswer sends.
	dnsQueries = 20000
	// dnsSources is how many client sockets, each on a loopback address
	// of its own, BenchmarkDNSAnswer rotates over. meshd answers at most
	// 200 queries a second from one source address (names.DefaultPerSource,
	// a flood's bound: the rest are dropped unanswered); over 512 sources
	// that would take more than 100,000 answers a second, several times
	// what one query in flight at a time reaches here.
	dnsSources = 512
)

// BenchmarkDNSAnswer (issue 30's target: a name answered within 1 ms at
// p99): one real meshd (init) in a namespace, asked from inside that
// namespace on its loopback DNS address (dns.loopback, 127.0.77.53:53)
// for a member's A record (its own), one query in flight at a time,
// dnsQueries per iteration, over UDP; the latency is the client's, from
// the write to the answer read, its kernel's loopback both ways included.
// Records the p50 and p99 (µs) and fails when the p99 is 1 ms or more, or
// when a query goes unanswered for a second. The sockets are opened
// inside the namespace (inNetns: a socket keeps the namespace it was
// made in) and used from this process, so no process start (ip netns
// exec) is measured. The node runs the suite's fast timers (the record
// says timers=fast); no timer enters an answer, which meshd reads from
// the zone it holds in memory.
func BenchmarkDNSAnswer(b *testing.B) {
	n := NewNet(b)
	origin := n.NewNode("origin")
	origin.Start(b)
	origin.MustCtl(b, "init", "--cluster", "e2e")
	const name = "origin." + namesDomain + "."
	Eventually(b, 10*time.Second, "origin's DNS answers for its own name", func() error {
		var st apitype.Status
		if err := origin.CtlJSON(b.Context(), &st, "status"); err != nil {
			return err
		}
		if st.DNS == nil || st.DNS.Names != 1 || !slices.Contains(st.DNS.Listening, net.JoinHostPort(nodeDNS, "53")) {
			return fmt.Errorf("status dns %+v", st.DNS)
		}
		return nil
	})
	want := net.ParseIP(overlayIPs(b, origin)["origin"])
	server := &net.UDPAddr{IP: net.ParseIP(nodeDNS), Port: 53}
	conns := make([]*net.UDPConn, 0, dnsSources)
	b.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
	})
	if err := inNetns(origin.Name, func() error {
		for i := range dnsSources {
			src := &net.UDPAddr{IP: net.IPv4(127, 0, 78+byte(i/250), byte(i%250+1))}
			c, err := net.DialUDP("udp", src, server)
			if err != nil {
				return fmt.Errorf("socket from %s: %w", src, err)
			}
			conns = append(conns, c)
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	q := new(dns.Msg)
	q.SetQuestion(name, dns.TypeA)
	wire, err := q.Pack()
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 1500)
	lat := make([]time.Duration, 0, b.N*dnsQueries)
	resp := new(dns.Msg)
	b.ResetTimer()
	for range b.N {
		for k := range dnsQueries {
			c := conns[k%dnsSources]
			id := uint16(k)
			wire[0], wire[1] = byte(id>>8), byte(id)
			start := time.Now()
			if _, err := c.Write(wire); err != nil {
				b.Fatalf("query %d: %v", k, err)
			}
			_ = c.SetReadDeadline(start.Add(time.Second))
			nr, err := c.Read(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					b.Fatalf("query %d from %s unanswered within 1 s (dropped over its source's rate?)", k, c.LocalAddr())
				}
				b.Fatalf("query %d: %v", k, err)
			}
			lat = append(lat, time.Since(start))
			if err := resp.Unpack(buf[:nr]); err != nil {
				b.Fatalf("answer %d: %v", k, err)
			}
			if resp.Id != id || resp.Rcode != dns.RcodeSuccess || len(resp.Answer) != 1 {
				b.Fatalf("answer %d: %v", k, resp)
			}
			if a, ok := resp.Answer[0].(*dns.A); !ok || !a.A.Equal(want) {
				b.Fatalf("answer %d: %v, want %s's A %s", k, resp.Answer[0], name, want)
			}
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
	b.ReportMetric(us(p50), "p50-µs")
	b.ReportMetric(us(p99), "p99-µs")
	Record(b, "answer-p50", "µs", us(p50))
	Record(b, "answer-p99", "µs", us(p99))
	over, _ := slices.BinarySearch(lat, time.Millisecond)
	b.Logf("%d answers from %s, one at a time: p50 %s, p99 %s, max %s, %d over 1 ms (timers: %s)",
		len(lat), nodeDNS, p50, p99, lat[len(lat)-1], len(lat)-over, suiteTimers)
	if p99 >= time.Millisecond {
		b.Errorf("p99 %s: want under 1 ms (issue 30)", p99)
	}
}
