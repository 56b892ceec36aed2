package apitype

import "time"

// PathForget is POST /v0/nodes/{name}/forget: a former node's record is
// dropped now (issue 52); its revocations stay.
const PathForget = "/v0/nodes/{name}/forget"

// ForgetResponse is the answer of PathForget: the record dropped, and the
// revocations of its certificates that stay until they expire.
type ForgetResponse struct {
	Name        string `json:"name"`
	ID          string `json:"id"`
	State       string `json:"state"` // what it was: left, removed or failed
	OverlayIP   string `json:"overlay_ip"`
	Revocations int    `json:"revocations_kept"`
}

// Hidden reports whether `meshctl nodes` leaves n out at now: a former
// node whose departure is older than the retention (meshd.yaml's
// former_retention), unless asked for every record (`nodes --all`, GET
// /v0/nodes?all=1).
func (n Node) Hidden(now time.Time, retention time.Duration) bool {
	switch n.State {
	case "left", "removed", "failed":
		return !n.Departed.IsZero() && now.Sub(n.Departed) > retention
	}
	return false
}
