package control

import (
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// The internal API's paths, on a control node's port 7300 (mTLS).
const (
	PathNodes       = "/v1/nodes"
	PathRevocations = "/v1/revocations"
	PathNebulaCert  = "/v1/self/nebula-cert"
	PathTLSCert     = "/v1/self/tls-cert"
	PathLeft        = "/v1/self/left"
	PathConfirm     = "/v1/self/confirm"
	PathApply       = "/v1/raft/apply"
	PathIndex       = "/v1/raft/index"
	PathRaftJoin    = "/v1/raft/join"
	PathRaftStats   = "/v1/raft/stats"
	PathRaftRemove  = "/v1/raft/remove"
	PathSignTLS     = "/v1/sign/tls"
	PathSignNebula  = "/v1/sign/nebula"
)

var (
	anyMember   = []pki.Role{pki.RoleWorker, pki.RoleControl}
	controlOnly = []pki.Role{pki.RoleControl}
)

// Route is one door of the internal API: who may pass, and what is behind
// it.
type Route struct {
	Method, Path string
	Roles        []pki.Role // the roles whose leaf the guard lets through
	Doc          string
	handle       func(p *Plane, w http.ResponseWriter, r *http.Request, c Caller)
}

// routes is the internal API: every door in one table, each behind guard.
// Adding a route means a row here and its handler.
var routes = []Route{
	{"GET", PathNodes, anyMember, "the node list, for a worker's `meshctl nodes`", (*Plane).handleNodes},
	{"GET", PathWatch, anyMember, "the changes a worker copies, since the index it names: a stream, or one change after a read index with strict=1 (watch.go)", (*Plane).handleWatch},
	{"GET", PathRevocations, anyMember, "what every Nebula must block", (*Plane).handleRevocations},
	{"GET", PathGossipKeys, anyMember, "the gossip keyring, for an active member", (*Plane).handleGossipKeys},
	{"GET", PathNebulaCert, anyMember, "the caller's current (renewed) Nebula host cert", (*Plane).handleNebulaCert},
	{"GET", PathTLSCert, anyMember, "the caller's current (renewed) TLS leaf", (*Plane).handleTLSCert},
	{"GET", PathCABundle, anyMember, "the CA trust bundles and the rotation phase", (*Plane).handleCABundle},
	{"POST", PathLeft, anyMember, "record the caller as left", (*Plane).handleLeft},
	{"POST", PathSelfTunnels, anyMember, "a worker reports its established Nebula tunnels (tunnels.go)", (*Plane).handleSelfTunnels},
	{"GET", PathTunnels, controlOnly, "this node's tunnels and the workers' reports it holds, for the cluster-wide view", (*Plane).handleTunnels},
	{"POST", PathSelfRoutes, anyMember, "record the prefixes the caller asks to carry (subnets.go)", (*Plane).handleSelfRoutes},
	{"POST", PathSelfFacts, anyMember, "record the caller's own facts, the version it runs and its signed CA report, in the next batch's raft write (facts.go)", (*Plane).handleSelfFacts},
	{"POST", PathSelfRelay, anyMember, "record the caller's own relay offer (relay: true) when it starts with another setting than its record's (relay.go)", (*Plane).handleSelfRelay},
	{"POST", PathConfirm, anyMember, "record the joining caller active: its join is confirmed", (*Plane).handleConfirm},
	{"POST", PathAbortJoin, anyMember, "undo the joining caller's own admission after its join failed on its machine: its certificates revoked, its token unused again (abortjoin.go)", (*Plane).handleAbortJoin},
	{"POST", PathHeard, controlOnly, "how long ago this lighthouse last took a host update from each of a batch of overlay addresses: the leader's liveness verdict asks (heard.go, verdict.go)", (*Plane).handleHeard},
	{"POST", PathApply, controlOnly, "the leader applies a write a follower forwarded", (*Plane).handleApply},
	{"GET", PathIndex, controlOnly, "the leader's FSM index, for a follower's read index", (*Plane).handleIndex},
	{"POST", PathRaftJoin, controlOnly, "a new control node asks to become a voter", (*Plane).handleRaftJoin},
	{"GET", PathRaftStats, controlOnly, "this node's raft progress, read by the leader before promotion", (*Plane).handleRaftStats},
	{"POST", PathRaftRemove, controlOnly, "the leader drops a server from raft: the caller itself, a former member, or a removal it records; never the CA holder", (*Plane).handleRaftRemove},
	{"POST", PathSignTLS, controlOnly, "the CA holder signs a TLS leaf", (*Plane).handleSignTLS},
	{"POST", PathSignNebula, controlOnly, "the CA holder signs a Nebula host cert", (*Plane).handleSignNebula},
	{"POST", PathCAReceive, controlOnly, "a CA handoff's target takes the keys from the holder on record and signs a probe", (*Plane).handleCAReceive},
	{"POST", PathCAProbe, controlOnly, "the CA holder signs a probe: it holds working keys", (*Plane).handleCAProbe},
}

// Routes lists the internal API's doors (method, path, roles, doc): for
// documentation, and for the authorization test that calls every one.
func Routes() []Route {
	out := slices.Clone(routes)
	for i := range out {
		out[i].Roles = slices.Clone(out[i].Roles)
		out[i].handle = nil
	}
	return out
}

// Handler serves port 7300: the enroll API (public: a joiner has no
// certificate yet; the token is its credential: enroll, check, time) and
// every route of the internal API behind the guard.
func (p *Plane) Handler(enrollAPI http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST "+enroll.Path, enrollAPI)
	mux.Handle("POST "+enroll.CheckPath, enrollAPI)
	mux.Handle("GET "+enroll.TimePath, enrollAPI)
	mux.Handle("POST "+enroll.NebulaPath, enrollAPI) // a stock Nebula member's bundle (issue 35)
	for _, rt := range routes {
		mux.HandleFunc(rt.Method+" "+rt.Path, p.guard(rt))
	}
	return mux
}

// Caller is who passed the guard.
type Caller struct {
	NodeID, Name string
	Role         pki.Role
	// Forwarded marks a request a control node passed on; it is never
	// forwarded again.
	Forwarded bool
}

// guard lets a request through to rt's handler only if its TLS peer
// presented a leaf of this cluster (verified at the handshake) whose role
// is one of rt.Roles (else codes.PeerRoleDenied), and is a member: its
// node's raft record is active (or joining, for the routes a join needs:
// servedToJoining) and lists this leaf (else codes.NotMember; see
// member).
func (p *Plane) guard(rt Route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, err := callerOf(r, rt.Roles)
		if err == nil {
			c, err = p.member(r.Context(), r.TLS.PeerCertificates[0], rt, c.Forwarded)
		}
		if err != nil {
			if codes.Of(err) == codes.NotMember {
				p.log.Info("refused a caller that is not a member", "code", codes.NotMember, "path", rt.Path, "err", err)
			}
			writeError(w, err)
			return
		}
		rt.handle(p, w, r, c)
	}
}

func callerOf(r *http.Request, roles []pki.Role) (Caller, error) {
	if r.TLS == nil {
		return Caller{}, codes.Wrap(codes.PeerRoleDenied, errors.New("not TLS"))
	}
	role, id, name, ok := pki.PeerIdentity(*r.TLS)
	if !ok || id == "" {
		return Caller{}, codes.Wrap(codes.PeerRoleDenied, errors.New("no client certificate of this cluster"))
	}
	if !slices.Contains(roles, role) {
		return Caller{}, codes.Wrap(codes.PeerRoleDenied, fmt.Errorf("caller %s has role %s; this route needs %v", id, role, roles))
	}
	return Caller{NodeID: id, Name: name, Role: role, Forwarded: r.Header.Get(forwardedHeader) != ""}, nil
}

func writeError(w http.ResponseWriter, err error) {
	c := codes.OrInternal(err)
	apitype.WriteJSON(w, c.Status(), ErrorBody{Error: *apitype.NewError(c, err), IPTaken: errors.Is(err, enroll.ErrIPTaken)})
}
