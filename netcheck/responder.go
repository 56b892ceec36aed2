package netcheck

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/meshd/meshd/persource"
	"github.com/pion/stun/v3"
)

// DefaultPort is STUN's IANA port, ports.stun's default.
const DefaultPort = 3478

// ResponderLimits bound what a responder answers: PerSource requests
// per source IP per Window (20 per 1 s), at most MaxSources sources in
// one window (4096); the rest are dropped and counted.
type ResponderLimits = persource.Limits

// ResponderStats count what a responder did with the packets it read.
type ResponderStats struct {
	Answered  uint64 // Binding requests answered
	Malformed uint64 // packets that are not a STUN Binding request, dropped
	Limited   uint64 // requests over a source's rate, dropped
}

// Responder answers STUN Binding requests on a UDP socket with the
// requester's address as it arrived (XOR-MAPPED-ADDRESS).
type Responder struct {
	conn  net.PacketConn
	log   *slog.Logger
	limit *persource.Limiter

	answered, malformed, limited atomic.Uint64
}

// NewResponder serves conn (Run) within limits; now is the clock (nil:
// time.Now).
func NewResponder(conn net.PacketConn, limits ResponderLimits, log *slog.Logger, now func() time.Time) *Responder {
	return &Responder{conn: conn, log: log, limit: persource.New(limits, now)}
}

// Listen opens the UDP socket a responder serves, on addr ("ip:port").
func Listen(addr string) (net.PacketConn, error) { return net.ListenPacket("udp", addr) }

// Stats are the responder's counters so far.
func (r *Responder) Stats() ResponderStats {
	return ResponderStats{Answered: r.answered.Load(), Malformed: r.malformed.Load(), Limited: r.limited.Load()}
}

// Addr is the address the responder serves.
func (r *Responder) Addr() net.Addr { return r.conn.LocalAddr() }

// Run answers requests until ctx ends; it closes the socket and returns
// nil then, or the socket's error.
func (r *Responder) Run(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { _ = r.conn.Close() })
	defer stop()
	buf := make([]byte, 1500)
	for {
		n, from, err := r.conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		r.handle(buf[:n], from)
	}
}

// handle answers one packet, or counts why not.
func (r *Responder) handle(pkt []byte, from net.Addr) {
	ua, ok := from.(*net.UDPAddr)
	if !ok {
		r.malformed.Add(1)
		return
	}
	src := ua.AddrPort()
	if !stun.IsMessage(pkt) {
		r.malformed.Add(1)
		return
	}
	req := &stun.Message{Raw: append([]byte(nil), pkt...)}
	if err := req.Decode(); err != nil || req.Type != stun.BindingRequest {
		r.malformed.Add(1)
		return
	}
	if !r.limit.Allow(src.Addr()) {
		r.limited.Add(1)
		return
	}
	resp, err := stun.Build(stun.NewTransactionIDSetter(req.TransactionID), stun.BindingSuccess,
		&stun.XORMappedAddress{IP: src.Addr().Unmap().AsSlice(), Port: int(src.Port())}, stun.Fingerprint)
	if err != nil { // cannot happen for a well-formed address; never answer half a message
		r.malformed.Add(1)
		return
	}
	if _, err := r.conn.WriteTo(resp.Raw, from); err != nil {
		r.log.Debug("stun answer not sent", "err", err) // the address is the requester's, its own
		return
	}
	r.answered.Add(1)
}
