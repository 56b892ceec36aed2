package preflight

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/mesh"
)

// Env is what a join and its plan share: the config (ports, bind
// address, TUN device, state dir, underlay pins, the clock bound), the
// clock and the log. Its methods are the joiner's side of the enroll
// client (the clock bound, where warnings go), the underlay choice, and
// the token expiry check that tells a wrong clock from an expired token.
type Env struct {
	Config config.File
	Now    func() time.Time
	Log    *slog.Logger
	// OverlayParked: a userspace overlay of this meshd's earlier
	// membership still runs in the process (agent/member.Parked) and holds
	// the Nebula port, which the next runtime takes over.
	OverlayParked bool
	// Sessions are the seeds' TLS sessions, kept from one connection of
	// a join to the next (enroll.NewSessions); nil: none.
	Sessions tls.ClientSessionCache
}

// EnrollDeps are the enroll client's collaborators for a join from
// underlay: the dialer binds it when it is this machine's, the clock bound
// is max_clock_skew, and warnings reach the operator as warning lines.
func (a Env) EnrollDeps(underlay netip.Addr, step func(string), warn func(apitype.Warning)) enroll.ClientDeps {
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	if underlay.IsValid() && mesh.IsLocal(underlay) {
		dialer.LocalAddr = &net.TCPAddr{IP: underlay.AsSlice()}
	}
	d := enroll.ClientDeps{Log: a.Log, Now: a.Now, Dial: dialer.DialContext, Step: step, MaxSkew: a.Config.MaxClockSkew,
		Sessions: a.Sessions}
	if warn != nil {
		d.Warn = func(c codes.Code, detail string) { warn(apitype.Warning{Code: c, Detail: detail}) }
	}
	return d
}

// UnderlayPin is the request's pin, or the config's when the request pins
// nothing.
func (a Env) UnderlayPin(addr, iface string) mesh.Pin {
	if p := (mesh.Pin{Addr: addr, Iface: iface}); !p.IsZero() {
		return p
	}
	return mesh.Pin{Addr: a.Config.AdvertiseAddr, Iface: a.Config.AdvertiseIface}
}

// Underlay chooses the address a join with tok advertises
// (mesh.ChooseUnderlay): the pin, or the source address of the route to
// the token's first seed that has one.
func (a Env) Underlay(ctx context.Context, pin mesh.Pin, tok enroll.Token) (mesh.Underlay, error) {
	return mesh.ChooseUnderlay(pin, seedAddrs(ctx, tok.Seeds))
}

// seedAddrs are the IPv4 or IPv6 addresses of seeds ("host:port"), in
// order; a host name is resolved (its first address), and one that does not
// resolve is left out.
func seedAddrs(ctx context.Context, seeds []string) []netip.Addr {
	var out []netip.Addr
	for _, s := range seeds {
		host, _, err := net.SplitHostPort(s)
		if err != nil {
			continue
		}
		if ip, err := netip.ParseAddr(host); err == nil {
			out = append(out, ip.Unmap())
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ips, err := net.DefaultResolver.LookupNetIP(rctx, "ip", host)
		cancel()
		if err == nil && len(ips) > 0 {
			out = append(out, ips[0].Unmap())
		}
	}
	return out
}

// CheckTokenExpiry is step 1's expiry check. When the token has expired
// by this machine's clock, it asks the seeds their time (pinned, nothing
// secret sent) to say which is at fault: by a seed's clock the token is
// still valid (codes.ClockSkew: fix this clock), or the seed agrees
// (codes.TokenExpired: mint a new token), or no seed answered (expired,
// with this clock named as the one thing not compared).
func (a Env) CheckTokenExpiry(ctx context.Context, tok enroll.Token, now time.Time) error {
	expired := tok.CheckExpiry(now)
	if expired == nil {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, r := range enroll.ProbeSeeds(pctx, tok, a.EnrollDeps(netip.Addr{}, nil, nil)) {
		if r.Err != nil || !r.HasClock {
			continue
		}
		if r.Skew.Remote.Before(tok.Expires) {
			return codes.Wrap(codes.ClockSkew, fmt.Errorf("the token has expired by this machine's clock, but not by %s's: "+
				"it expires at %s; %s. Fix this machine's clock, then join again: the token was not used",
				r.Seed, tok.Expires.UTC().Format(time.RFC3339), r.Skew))
		}
		return codes.Wrap(codes.TokenExpired, fmt.Errorf("%w; seed %s's clock agrees (it reads %s): the token is at fault, not this clock",
			expired, r.Seed, r.Skew.Remote.UTC().Format(time.RFC3339)))
	}
	return codes.Wrap(codes.TokenExpired, fmt.Errorf("%w; this machine's clock reads %s and no seed answered to compare it with: "+
		"if this clock is right, the token is at fault", expired, now.UTC().Format(time.RFC3339)))
}
