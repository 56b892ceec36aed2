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
}
