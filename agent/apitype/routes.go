package apitype

// The local API of routes and exit nodes (issue 33).
const (
	// PathRoutes is GET: every prefix asked, approved and carried
	// (`meshctl routes list`), from this node's view of raft's records.
	PathRoutes = "/v0/routes"
	// PathRoutesAdvertise is POST: the prefixes this node asks to carry
	// (`meshctl routes advertise`), replacing what it asked before.
	PathRoutesAdvertise = "/v0/routes/advertise"
	// PathRoutesApprove, PathRoutesWithdraw and PathRoutesPrefer are POST,
	// on a control node: approve a node's prefix, take an approval back,
	// move a prefix to another approved router.
	PathRoutesApprove  = "/v0/routes/approve"
	PathRoutesWithdraw = "/v0/routes/withdraw"
	PathRoutesPrefer   = "/v0/routes/prefer"
	// PathExit is GET (this node's exit node) and POST (`meshctl exit use
	// NODE`, or off with no node).
	PathExit = "/v0/exit"
)

// NodeRoute is one prefix a node asks to carry.
type NodeRoute struct {
	Prefix     string `json:"prefix"`
	Exit       bool   `json:"exit,omitempty"` // 0.0.0.0/0: the node offers itself as an exit node
	Approved   bool   `json:"approved,omitempty"`
	ApprovedBy string `json:"approved_by,omitempty"`
	Carrier    bool   `json:"carrier,omitempty"` // it carries the prefix now
	Held       bool   `json:"held,omitempty"`    // its current Nebula certificate holds the prefix
}

// AdvertiseRequest is PathRoutesAdvertise's body: the prefixes (CIDR),
// and Exit to offer this node as an exit node too. An empty request
// withdraws every request.
type AdvertiseRequest struct {
	Prefixes []string `json:"prefixes"`
	Exit     bool     `json:"exit,omitempty"`
}

// RouteRequest names a node's prefix: PathRoutesApprove,
// PathRoutesWithdraw and PathRoutesPrefer's body.
type RouteRequest struct {
	Node   string `json:"node"`
	Prefix string `json:"prefix"`
}

// RouteRow is one line of `meshctl routes list`: a prefix one node asks
// for.
type RouteRow struct {
	Prefix     string `json:"prefix"`
	Node       string `json:"node"`
	Exit       bool   `json:"exit,omitempty"`
	State      string `json:"state"` // requested, approved
	ApprovedBy string `json:"approved_by,omitempty"`
	// Carrier: raft names this node the prefix's carrier now.
	Carrier bool `json:"carrier,omitempty"`
	// Active: approved, and carried by this node now (an exit node: up
	// in gossip); Standby: approved, another router carries it.
	Active  bool   `json:"active,omitempty"`
	Standby bool   `json:"standby,omitempty"`
	Gossip  string `json:"gossip,omitempty"` // the router's gossip status as this node sees it
}

// Routes is PathRoutes' answer.
type Routes struct {
	Routes []RouteRow `json:"routes"`
	// Exit is this node's exit node, when it uses one.
	Exit *ExitState `json:"exit,omitempty"`
}

// ExitRequest is PathExit's POST body: the exit node to use, or "" for
// none (`meshctl exit off`).
type ExitRequest struct {
	Node string `json:"node"`
}

// ExitState is the exit node this node sends its default route through.
type ExitState struct {
	Node string `json:"node"`
	Via  string `json:"via"` // its overlay address
	// Error is why the default route is not through it now (the node is
	// no longer an approved exit node, or the kernel refused), when so.
	Error string `json:"error,omitempty"`
}
