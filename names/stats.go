package names

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// LatencyBounds are the answer latency histogram's upper bounds, in
// seconds (the last bucket, +Inf, is implied).
var LatencyBounds = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01}

// Stats are a server's counters since it started.
type Stats struct {
	Queries   uint64            // queries parsed and within their source's rate
	Rcodes    map[string]uint64 // answers sent, by rcode name (NOERROR, NXDOMAIN, REFUSED, ...)
	Limited   uint64            // queries over their source's rate, dropped
	Malformed uint64            // packets that are not a plain query, or do not parse, dropped
	Latency   Histogram         // from a query parsed to its answer written
}

// Histogram is a cumulative-free histogram: Counts[i] counts the
// observations in (Bounds[i-1], Bounds[i]]; the last count is past the
// last bound.
type Histogram struct {
	Bounds []float64
	Counts []uint64
	Sum    float64 // seconds
	Count  uint64
}

type stats struct {
	queries, limited, malformed atomic.Uint64

	mu      sync.Mutex
	rcodes  map[int]uint64
	buckets []uint64
	sum     float64
	count   uint64
}

func newStats() *stats {
	return &stats{rcodes: map[int]uint64{}, buckets: make([]uint64, len(LatencyBounds)+1)}
}

// observe counts an answer sent with rcode after d.
func (s *stats) observe(rcode int, d time.Duration) {
	sec := d.Seconds()
	i := 0
	for i < len(LatencyBounds) && sec > LatencyBounds[i] {
		i++
	}
	s.mu.Lock()
	s.rcodes[rcode]++
	s.buckets[i]++
	s.sum += sec
	s.count++
	s.mu.Unlock()
}

// Stats are the server's counters now.
func (s *Server) Stats() Stats {
	st := s.stats
	out := Stats{Queries: st.queries.Load(), Limited: st.limited.Load(), Malformed: st.malformed.Load(),
		Rcodes: map[string]uint64{}}
	st.mu.Lock()
	defer st.mu.Unlock()
	for rc, n := range st.rcodes {
		name, ok := dns.RcodeToString[rc]
		if !ok {
			name = "OTHER"
		}
		out.Rcodes[name] += n
	}
	out.Latency = Histogram{Bounds: LatencyBounds, Counts: append([]uint64(nil), st.buckets...), Sum: st.sum, Count: st.count}
	return out
}
