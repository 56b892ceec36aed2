package apitype

import "time"

// PathPing is POST /v0/ping: one reachability probe over the overlay
// (`meshctl ping`).
const PathPing = "/v0/ping"

// PingRequest asks the daemon for one probe of the node Name.
type PingRequest struct {
	Name string `json:"name"`
	// Timeout bounds the probe (zero: 1 s; at most 30 s).
	Timeout time.Duration `json:"timeout,omitempty"`
	// Port is the overlay port probed; zero: the node's gossip port,
	// which meshd's own firewall rule always opens (the path alone is
	// probed). Another port is probed through the node's inbound
	// firewall: a port nobody listens on answers with a reset.
	Port int `json:"port,omitempty"`
}

// PingReply is one probe's outcome. A probe is a TCP connection attempt
// from this node to the peer's overlay address, on its gossip port; an
// answer of either kind (accepted, or refused with a reset) crossed the
// overlay both ways. Answered false means a lost probe: no answer within
// the timeout, or a local failure such as no route to the peer; Lost says
// which.
type PingReply struct {
	Name      string        `json:"name"`
	OverlayIP string        `json:"overlay_ip"`
	Port      int           `json:"port"`
	Answered  bool          `json:"answered"`
	Answer    string        `json:"answer,omitempty"` // "accepted" or "refused"
	Lost      string        `json:"lost,omitempty"`   // "timeout", or the local reason ("no route to host")
	RTT       time.Duration `json:"rtt,omitempty"`
	Timeout   time.Duration `json:"timeout"`
	// Path is the tunnel to the node as this node's Nebula host map has
	// it right after the probe; nil when there is none (a probe lost
	// before a handshake completed, or this node itself). A meshd older
	// than this field sends none either.
	Path *PingPath `json:"path,omitempty"`
}

// PingPath is the underlay path of the tunnel a probe went through: one
// of Direct (the node's underlay address, where Nebula sends to it) or
// Relay (the node that relays the tunnel).
type PingPath struct {
	Direct  string `json:"direct,omitempty"`   // underlay ip:port
	Relay   string `json:"relay,omitempty"`    // the relay's node name (its overlay IP when no record names it)
	RelayIP string `json:"relay_ip,omitempty"` // the relay's overlay IP
}

// String is the path as meshctl prints it: "direct ADDR" or "relayed
// via NAME".
func (p PingPath) String() string {
	if p.Relay != "" {
		return "relayed via " + p.Relay
	}
	return "direct " + p.Direct
}
