package control

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// BenchmarkHandshake (issue 54 item 4): one mTLS connection to port 7300
// as a worker's client makes it, full (no session to resume) and
// resumed, with the configs meshd runs (pki.LiveServerTLSConfig,
// NewLiveClient's), over loopback TCP. Both ends run in this process:
// cpu-µs/op is the two ends together (getrusage), wall-µs/op one
// connection's handshake plus a one-byte answer, which brings the
// client the session ticket.
func BenchmarkHandshake(b *testing.B) {
	c := &testCluster{ca: pkitest.NewCA(b, "alpha")}
	srvID, _, _ := c.identity(b, "c1", pki.RoleControl)
	live, err := pki.NewLiveIdentity(srvID)
	if err != nil {
		b.Fatal(err)
	}
	srvConf, err := pki.LiveServerTLSConfig(live)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", srvConf)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				if conn.(*tls.Conn).Handshake() == nil {
					_, _ = conn.Write([]byte{1})
					_, _ = io.Copy(io.Discard, conn)
				}
			}()
		}
	}()
	wID, _, _ := c.identity(b, "w1", pki.RoleWorker)
	for _, mode := range []string{"full", "resumed"} {
		b.Run(mode, func(b *testing.B) {
			cl, err := NewClient(wID)
			if err != nil {
				b.Fatal(err)
			}
			conf := cl.http.Transport.(*http.Transport).TLSClientConfig.Clone()
			if mode == "full" {
				conf.ClientSessionCache = nil
			}
			connect := func() bool {
				raw, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					b.Fatal(err)
				}
				conn := tls.Client(raw, conf)
				defer conn.Close()
				if err := conn.Handshake(); err != nil {
					b.Fatal(err)
				}
				var one [1]byte
				if _, err := io.ReadFull(conn, one[:]); err != nil {
					b.Fatal(err)
				}
				return conn.ConnectionState().DidResume
			}
			connect() // a session to resume
			resumed := 0
			cpu0, t0 := cpuNow(b), time.Now()
			b.ResetTimer()
			for range b.N {
				if connect() {
					resumed++
				}
			}
			b.StopTimer()
			cpu, wall := cpuNow(b)-cpu0, time.Since(t0)
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
			b.ReportMetric(float64(wall.Microseconds())/float64(b.N), "wall-µs/op")
			b.ReportMetric(float64(resumed)/float64(b.N), "resumed/op")
			if mode == "resumed" && resumed != b.N {
				b.Errorf("%d of %d connections resumed", resumed, b.N)
			}
		})
	}
}
