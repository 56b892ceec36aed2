package apitype

import "time"

// The CA rotation's local API paths.
const (
	PathCARotate = "/v0/ca/rotate" // POST: `meshctl ca rotate [--now]`, on the CA holder
	PathCAStatus = "/v0/ca"        // GET: `meshctl ca status`, control nodes
)

// CAStatus answers `meshctl ca status` and `meshctl ca rotate`: the CA
// rotation's phase and what still depends on the old CA.
type CAStatus struct {
	Phase   string    `json:"phase"`            // none, trust or reissue
	Current string    `json:"current"`          // hex SHA-256 of the current CA
	Next    string    `json:"next,omitempty"`   // the next CA, during a rotation
	Signing string    `json:"signing"`          // the CA the CA holder signs with
	Holder  string    `json:"holder,omitempty"` // the CA holder's name
	Started time.Time `json:"started,omitzero"` // when the rotation began
	Now     bool      `json:"now,omitempty"`    // begun with --now
	Rotated time.Time `json:"rotated,omitzero"` // when the last rotation finished
	// What still depends on the old CA: certificates on record
	// ("NAME: tls|nebula"), members whose report lags ("NAME (why)"),
	// usable tokens minted before the rotation.
	Certificates []string `json:"certificates,omitempty"`
	Members      []string `json:"members,omitempty"`
	Tokens       []string `json:"tokens,omitempty"`
	// Overlay is the IPv4 overlay; Overlay6 the IPv6 one of a dual-stack
	// cluster, or the one a move to v2 certificates brings (Moving).
	Overlay  string `json:"overlay,omitempty"`
	Overlay6 string `json:"overlay6,omitempty"`
	Moving   bool   `json:"moving,omitempty"`
	// DualStack of Active active nodes hold a dual-stack (v2)
	// certificate on record: a move's progress.
	DualStack int `json:"dual_stack"`
	Active    int `json:"active"`
}

// CARotateRequest is the body of POST /v0/ca/rotate.
type CARotateRequest struct {
	Now bool `json:"now,omitempty"`
	// DualStack moves an IPv4-only cluster to v2 certificates and a
	// dual-stack overlay: OverlayCIDR6 as `init --overlay-cidr6` takes
	// it (empty: a generated ULA /64), Overlay6Global as its flag.
	DualStack      bool   `json:"dual_stack,omitempty"`
	OverlayCIDR6   string `json:"overlay_cidr6,omitempty"`
	Overlay6Global bool   `json:"overlay6_global,omitempty"`
}
