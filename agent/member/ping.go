package member

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
)

// `meshctl ping` asks the daemon for one probe at a time: a TCP
// connection attempt to the peer's overlay address on its gossip port
// (every node listens there). Why TCP and not ICMP: it works the same in
// userspace mode, where there is no kernel TUN to send ICMP from and
// Nebula's netstack offers only TCP/UDP dialling; it needs no raw socket
// or ping_group_range in the daemon; and the peer's kernel (or netstack)
// answers a connection attempt even on a closed port, with a reset. Either
// answer crossed the overlay both ways: the probe measures the round trip
// of the SYN and its answer, the first one including Nebula's handshake
// when no tunnel existed yet. The peer's inbound firewall must allow TCP
// to that port from this node, or the probe is dropped like any other
// packet (which is what an operator checking a firewall wants to see).

const (
	defaultPingTimeout = time.Second
	maxPingTimeout     = 30 * time.Second
)

// pingTarget is where a probe goes.
type pingTarget struct {
	overlay netip.Addr
	port    int
}

// ping runs one probe of req.Name.
func (rt *Runtime) Ping(ctx context.Context, req apitype.PingRequest) (apitype.PingReply, error) {
	timeout := req.Timeout
	if timeout == 0 {
		timeout = defaultPingTimeout
	}
	if timeout < 0 || timeout > maxPingTimeout {
		return apitype.PingReply{}, codes.Wrap(codes.BadRequest, fmt.Errorf("probe timeout %s: want up to %s", timeout, maxPingTimeout))
	}
	if req.Port < 0 || req.Port > 65535 {
		return apitype.PingReply{}, codes.Wrap(codes.BadRequest, fmt.Errorf("probe port %d: want 1 to 65535, or 0 for the gossip port", req.Port))
	}
	tg, err := rt.pingTarget(req.Name, rt.ports.Gossip)
	if err != nil {
		return apitype.PingReply{}, err
	}
	if req.Port != 0 {
		tg.port = req.Port
	}
	out := apitype.PingReply{Name: req.Name, OverlayIP: tg.overlay.String(), Port: tg.port, Timeout: timeout}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addr := netip.AddrPortFrom(tg.overlay, uint16(tg.port)).String()
	start := time.Now()
	conn, err := rt.dialOverlay(pctx, addr)
	rtt := time.Since(start)
	if err == nil {
		_ = conn.Close()
	}
	if ctx.Err() != nil { // the caller went away: not a probe outcome
		return out, ctx.Err()
	}
	out.Answered, out.Answer, out.Lost = probeOutcome(err, pctx.Err() != nil)
	if out.Answered {
		out.RTT = rtt
	}
	out.Path = rt.pingPath(tg.overlay) // pingpath.go
	return out, nil
}

// dialOverlay opens a TCP connection to addr (an overlay address) through
// the overlay: the TUN device in kernel mode, Nebula's userspace stack
// otherwise.
func (nd *node) dialOverlay(ctx context.Context, addr string) (net.Conn, error) {
	if nd.mesh != nil && nd.mesh.Userspace() {
		return nd.mesh.DialContext(ctx, "tcp", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// reachOverlay probes a node's overlay address directly: a TCP
// connection to its gossip port, through Nebula, which completes only
// with the certificate issued for that address. nil when the node there
// answers (accepts or resets); the control plane counts a member up for
// a decision only on this (control.Hooks.Reach), never on gossip alone.
func (nd *node) reachOverlay(ctx context.Context, addr netip.Addr) error {
	return nd.reachAddr(ctx, netip.AddrPortFrom(addr, uint16(nd.ports.Gossip)))
}

// gossipListens is reachOverlay read strictly, for gossip's bad news
// about a member (evidence.go): only an accepted connection counts, since
// that claim is about the member's gossip. A reset says the node's
// overlay is up but nothing listens on its gossip port: its gossip is
// down indeed (a runtime stopped in a meshd that keeps running, whose
// userspace Nebula is parked, answers so).
func (nd *node) gossipListens(ctx context.Context, addr netip.Addr) error {
	c, err := nd.dialOverlay(ctx, netip.AddrPortFrom(addr, uint16(nd.ports.Gossip)).String())
	if err != nil {
		return err
	}
	return c.Close()
}

// reachAddr is reachOverlay's probe of one overlay address and port.
func (nd *node) reachAddr(ctx context.Context, ap netip.AddrPort) error {
	c, err := nd.dialOverlay(ctx, ap.String())
	switch {
	case err == nil:
		return c.Close()
	case refused(err):
		return nil
	}
	return err
}

// probeOutcome classifies a probe's dial result. An accepted connection
// or a reset is an answer. Anything else is a lost probe with its reason,
// never an error of the call: a timeout, or a local refusal such as "no
// route to host" when the kernel or Nebula has no path to the peer (a
// stopped node's tunnel torn down). Either way meshctl counts the probe
// lost and still prints its summary.
func probeOutcome(err error, timedOut bool) (answered bool, answer, lost string) {
	switch {
	case err == nil:
		return true, "accepted", ""
	case refused(err):
		return true, "refused", ""
	case timedOut:
		return false, "", "timeout"
	default:
		return false, "", dialReason(err)
	}
}

// refused reports whether a dial failed because the peer answered with a
// reset: ECONNREFUSED from the kernel, gvisor's "connection was refused"
// in userspace mode.
func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), "connection was refused")
}

// dialReason is the short reason a dial failed locally: the errno's text
// ("no route to host") when there is one, else the error's last part.
func dialReason(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		msg = msg[i+2:]
	}
	return msg
}

// pingTarget looks name up in the records this node holds (the FSM on a
// control node, the node list on a worker): an active node's overlay
// address and gossip port (the recorded one, else this node's
// ports.gossip). Anything else is codes.NodeUnknown.
func (rt *Runtime) pingTarget(name string, defaultPort int) (pingTarget, error) {
	var (
		found bool
		st    state.NodeState
		ovl   netip.Addr
		serf  string
	)
	list, _ := rt.cluster.Records()
	for _, n := range list {
		if n.Name == name && (!found || n.Active()) {
			found, st, serf = true, n.StateOf(), n.SerfAddr
			ovl, _ = netip.ParseAddr(n.OverlayIP)
		}
	}
	switch {
	case !found:
		return pingTarget{}, codes.Wrap(codes.NodeUnknown, fmt.Errorf("no node named %q", name))
	case st != state.NodeActive:
		return pingTarget{}, codes.Wrap(codes.NodeUnknown, fmt.Errorf("node %s is %s, not active: it has no overlay to probe", name, st))
	case !ovl.IsValid():
		return pingTarget{}, codes.Wrap(codes.NodeUnknown, fmt.Errorf("node %s has no overlay address on record", name))
	}
	port := defaultPort
	if _, p, err := net.SplitHostPort(serf); err == nil {
		if n, err := strconv.Atoi(p); err == nil && n > 0 && n <= 65535 {
			port = n
		}
	}
	return pingTarget{overlay: ovl, port: port}, nil
}
