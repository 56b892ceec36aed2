package apitype

// PathNetcheck is GET /v0/netcheck: the path check of this node against
// the control nodes (`meshctl netcheck`).
const PathNetcheck = "/v0/netcheck"

// NetcheckReport is a path check's outcome: one STUN exchange from one
// local UDP socket with each control node (on its ports.stun), and the
// verdicts. Lines are the check as lines with codes (a line per control
// node, then the mapping and the path); a failed line (codes.
// OverlayUDPBlocked, codes.NetcheckUnreachable) is the check's failure.
type NetcheckReport struct {
	Local   string           `json:"local"` // the socket's ip:port
	Targets []NetcheckTarget `json:"targets"`
	UDP     bool             `json:"udp"`     // a control node answered over UDP
	Blocked bool             `json:"blocked"` // none did while one accepted TCP
	NAT     bool             `json:"nat"`     // a control node saw another address than the local one
	// Mapping is port-preserving, endpoint-independent, symmetric or
	// unknown (fewer than two answered).
	Mapping string `json:"mapping"`
	// Direct: a direct path to nodes behind other NATs can be punched.
	Direct bool `json:"direct"`
	// Relay is the control node that would carry what cannot go direct.
	Relay string      `json:"relay,omitempty"`
	Lines []PlanCheck `json:"lines"`
}

// NetcheckTarget is one control node's answer.
type NetcheckTarget struct {
	Name     string  `json:"name"`
	STUN     string  `json:"stun"` // ip:port asked
	Answered bool    `json:"answered"`
	Mapped   string  `json:"mapped,omitempty"` // the address it saw this node as
	RTTms    float64 `json:"rtt_ms,omitempty"`
}

// Failed is the first failed line, or nil.
func (r *NetcheckReport) Failed() *PlanCheck {
	for i := range r.Lines {
		if r.Lines[i].Status == CheckFail {
			return &r.Lines[i]
		}
	}
	return nil
}
