package names

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/meshd/meshd/persource"
)

// MaxAnswer caps a reply's size in bytes over UDP, whatever a query's
// EDNS0 buffer asks: 1232, the DNS flag day 2020 size that fits any
// path's MTU. Replies hold one record (two, the A and the AAAA, for ANY
// of a dual-stack member), so none comes near it; a reply that would is
// truncated (TC) by the library.
const MaxAnswer = 1232

// Limits bound what a server answers.
type Limits struct {
	// Source is the rate per source address: queries over it are
	// dropped unanswered and counted (Stats.Limited). Zero fields take
	// persource's defaults; PerSource zero here means 200 a second.
	Source persource.Limits
}

// DefaultPerSource is how many queries one source gets answered per
// second by default: far above what a host's resolver asks of one zone,
// far below what would let one member keep a node's meshd busy.
const DefaultPerSource = 200

// Server answers DNS queries for the cluster's names from the zone it
// was last given (SetZone), over UDP and TCP on each address it serves
// (Serve). The wire format is github.com/miekg/dns's.
type Server struct {
	zone  atomic.Pointer[Zone]
	limit *persource.Limiter
	stats *stats
	log   *slog.Logger
	now   func() time.Time

	mu      sync.Mutex
	servers []*dns.Server
	addrs   []string
	closed  bool
	wg      sync.WaitGroup
}

// NewServer is a server with no zone yet (every query is refused until
// SetZone) and nothing served yet (Serve); now is its clock (nil:
// time.Now), used for the rate windows and the answer latency.
func NewServer(limits Limits, log *slog.Logger, now func() time.Time) *Server {
	if now == nil {
		now = time.Now
	}
	if limits.Source.PerSource <= 0 {
		limits.Source.PerSource = DefaultPerSource
	}
	return &Server{limit: persource.New(limits.Source, now), stats: newStats(), log: log, now: now}
}

// SetZone makes z the zone every answer from now on is read from.
func (s *Server) SetZone(z *Zone) { s.zone.Store(z) }

// Zone is the zone answers are read from now; nil before the first.
func (s *Server) Zone() *Zone { return s.zone.Load() }

// Addrs are the addresses served, UDP and TCP alike ("127.0.77.53:53").
func (s *Server) Addrs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.addrs...)
}

// Serve answers on pc (UDP) and ln (TCP), which must be the same address,
// until Close. The server owns both from here, even on an error.
func (s *Server) Serve(pc net.PacketConn, ln net.Listener) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = pc.Close()
		_ = ln.Close()
		return net.ErrClosed
	}
	udp := s.dnsServer()
	udp.PacketConn = pc
	// The library's UDP loop sets ReadTimeout as the deadline of each
	// read and loops on its expiry: at 2 s, two wakeups a second per
	// listener pair on an idle node (issue 54). A UDP read holds no
	// client's state, and ShutdownContext unblocks it at once.
	udp.ReadTimeout = udpReadIdle
	tcp := s.dnsServer()
	tcp.Listener = ln
	s.servers = append(s.servers, udp, tcp)
	s.addrs = append(s.addrs, pc.LocalAddr().String())
	var failed error
	for _, srv := range []*dns.Server{udp, tcp} {
		started, ended := make(chan struct{}), make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		s.wg.Go(func() {
			defer close(ended)
			if err := srv.ActivateAndServe(); err != nil && !errors.Is(err, net.ErrClosed) {
				s.log.Warn("dns listener stopped", "addr", pc.LocalAddr().String(), "err", err)
				failed = err
			}
		})
		select { // Shutdown refuses a server that has not started
		case <-started:
		case <-ended: // refused before it started: nothing to shut down
			return failed
		}
	}
	return nil
}

// udpReadIdle is the UDP listener's read deadline (Serve).
const udpReadIdle = time.Hour

// dnsServer is one listener's library server: the handler, the
// header check that drops what is not a plain query (counted), and the
// writer that drops the FORMERR the library would send for a packet
// whose body does not parse (counted by MsgInvalidFunc).
func (s *Server) dnsServer() *dns.Server {
	return &dns.Server{
		Handler:        dns.HandlerFunc(s.ServeDNS),
		UDPSize:        MaxAnswer,
		ReadTimeout:    2 * time.Second,
		WriteTimeout:   2 * time.Second,
		IdleTimeout:    func() time.Duration { return 8 * time.Second },
		MaxTCPQueries:  128,
		MsgAcceptFunc:  s.accept,
		MsgInvalidFunc: func([]byte, error) { s.stats.malformed.Add(1) },
		DecorateWriter: func(w dns.Writer) dns.Writer { return dropFormErr{w} },
	}
}

// Close stops every listener and waits for them.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	servers := s.servers
	s.servers = nil
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, srv := range servers {
		_ = srv.ShutdownContext(ctx)
	}
	s.wg.Wait()
}

// accept looks at a packet's header: a plain query (not a response,
// opcode QUERY, one question, no answer or authority records, at most
// one additional, the EDNS0 OPT) goes on; anything else is dropped
// unanswered and counted malformed.
func (s *Server) accept(dh dns.Header) dns.MsgAcceptAction {
	const qr = 1 << 15
	opcode := int(dh.Bits>>11) & 0xF
	if dh.Bits&qr != 0 || opcode != dns.OpcodeQuery || dh.Qdcount != 1 || dh.Ancount != 0 || dh.Nscount != 0 || dh.Arcount > 1 {
		s.stats.malformed.Add(1)
		return dns.MsgIgnore
	}
	return dns.MsgAccept
}

// ServeDNS answers one parsed query: within its source's rate, from the
// current zone, capped in size.
func (s *Server) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	start := s.now()
	if !s.limit.Allow(addrOf(w.RemoteAddr())) {
		s.stats.limited.Add(1)
		return // dropped: an answer is what a flood wants
	}
	resp := s.Answer(req)
	size := dns.MinMsgSize
	if _, isTCP := w.RemoteAddr().(*net.TCPAddr); isTCP {
		size = dns.MaxMsgSize
	} else if opt := req.IsEdns0(); opt != nil {
		size = max(dns.MinMsgSize, min(int(opt.UDPSize()), MaxAnswer))
	}
	resp.Truncate(size)
	if err := w.WriteMsg(resp); err != nil {
		s.log.Debug("dns answer not sent", "err", err)
		return
	}
	s.stats.observe(resp.Rcode, s.now().Sub(start))
}

// Answer is the reply to req from the current zone (Zone.Answer); with
// no zone yet, REFUSED. An EDNS0 query gets an OPT record back.
func (s *Server) Answer(req *dns.Msg) *dns.Msg {
	s.stats.queries.Add(1)
	var resp *dns.Msg
	if z := s.zone.Load(); z != nil {
		resp = z.Answer(req)
	} else {
		resp = new(dns.Msg)
		resp.SetRcode(req, dns.RcodeRefused)
	}
	if req.IsEdns0() != nil {
		resp.SetEdns0(MaxAnswer, false)
	}
	return resp
}

// addrOf is the IP of a UDP or TCP address (the zero Addr otherwise:
// every such source shares one rate).
func addrOf(a net.Addr) netip.Addr {
	switch a := a.(type) {
	case *net.UDPAddr:
		return a.AddrPort().Addr()
	case *net.TCPAddr:
		return a.AddrPort().Addr()
	}
	return netip.Addr{}
}

// dropFormErr drops the FORMERR the library writes for a query whose
// body does not parse (the handler never answers FORMERR: a query it sees
// has one question): the sender learns nothing, as for any other junk.
type dropFormErr struct{ dns.Writer }

func (d dropFormErr) Write(b []byte) (int, error) {
	if len(b) >= 4 && b[2]&0x80 != 0 && b[3]&0x0F == dns.RcodeFormatError {
		return len(b), nil
	}
	return d.Writer.Write(b)
}
