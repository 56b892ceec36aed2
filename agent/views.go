package agent

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/raftnode"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// internalNodesPath serves the node list to any member with a leaf of this
// cluster (workers have no raft of their own).
const internalNodesPath = "/v1/nodes"

func (a *Agent) status() apitype.Status {
	a.mu.Lock()
	ph, rt := a.phase, a.rt
	a.mu.Unlock()
	s := apitype.Status{State: string(ph), Version: a.d.Version}
	if rt == nil {
		return s
	}
	f := rt.facts
	s.Cluster, s.ClusterID, s.Node, s.NodeID = f.ClusterName, f.ClusterID, f.Name, f.NodeID
	s.Role, s.CAHolder = string(f.Role), f.CAHolder
	s.OverlayIP, s.Underlay = f.Overlay.Addr().String(), f.Underlay.String()
	s.CertExpires = rt.leaf.NotAfter
	s.Overlay, s.Gossip = rt.overlayStatus(), rt.gossipStatus()
	if s.Gossip != nil && s.Gossip.KeyErrors > 0 {
		s.Warnings = append(s.Warnings, apitype.Warning{Code: codes.GossipKey,
			Detail: fmt.Sprintf("%d gossip messages could not be decrypted with this node's keys", s.Gossip.KeyErrors)})
	}
	s.Raft = string(raftnode.None)
	if rt.raft != nil {
		s.Raft = string(rt.raft.RoleOf(f.NodeID))
		if id := rt.raft.LeaderID(); id != "" {
			if n, ok := rt.raft.FSM().Node(id); ok {
				s.Leader = n.Name
			} else {
				s.Leader = id
			}
		}
	}
	return s
}

// nodes lists the cluster from this node's raft, or asks a control node.
func (a *Agent) nodes(ctx context.Context) ([]apitype.Node, error) {
	rt, err := a.running()
	if err != nil {
		return nil, err
	}
	if rt.raft != nil {
		if err := rt.freshRead(ctx); err != nil {
			return nil, err
		}
		return rt.nodeRows(), nil
	}
	return rt.remoteNodes(ctx)
}

func (rt *runtime) nodeRows() []apitype.Node {
	roles := rt.raft.Roles()
	members := map[string]string{}
	if rt.gossip != nil {
		for _, m := range rt.gossip.Members() {
			members[m.Name] = string(m.Status)
		}
	}
	out := []apitype.Node{}
	for _, n := range rt.raft.FSM().Nodes() {
		row := nodeRow(n, roles[n.ID])
		if g, ok := members[n.Name]; ok {
			row.Gossip = g
		}
		out = append(out, row)
	}
	return out
}

func (rt *runtime) overlayStatus() *apitype.Overlay {
	if rt.mesh == nil {
		return nil
	}
	applied := rt.applied()
	o := &apitype.Overlay{Mode: "kernel", Device: applied.TunDev, Lighthouse: applied.AmLighthouse,
		Lighthouses: []string{}, StaticHosts: len(applied.StaticHosts), Blocklist: len(applied.Blocklist),
		Tunnels: []apitype.Tunnel{}}
	if applied.Userspace {
		o.Mode, o.Device = "userspace", ""
	}
	if fp, exp, err := pki.NebulaCertInfo(applied.Cert); err == nil {
		o.CertFingerprint, o.CertExpires = fp, exp
	}
	for _, l := range applied.Lighthouses {
		o.Lighthouses = append(o.Lighthouses, l.OverlayIP.String())
	}
	for _, tn := range rt.mesh.Tunnels() {
		o.Tunnels = append(o.Tunnels, apitype.Tunnel{OverlayIP: tn.OverlayIP.String(), Remote: tn.Remote.String(), Name: tn.CertName})
	}
	if b, ok := rt.overlayErr.Load().(errBox); ok && b.err != nil {
		o.Error = apitype.NewError(codes.OrInternal(b.err), b.err)
	}
	return o
}

func (rt *runtime) gossipStatus() *apitype.Gossip {
	if rt.gossip == nil {
		return nil
	}
	g := &apitype.Gossip{KeyErrors: rt.gossip.KeyErrors()}
	for _, m := range rt.gossip.Members() {
		g.Members++
		if m.Status == "alive" {
			g.Alive++
		}
	}
	return g
}

func nodeRow(n state.Node, raftRole raftnode.Role) apitype.Node {
	if raftRole == "" {
		raftRole = raftnode.None
	}
	row := apitype.Node{
		Name: n.Name, ID: n.ID, Role: string(n.Role), State: string(n.State),
		Gossip: "unknown", Underlay: n.Underlay, Raft: string(raftRole),
		CertExpires: n.TLSExpires, Version: n.Version,
	}
	if n.OverlayIP.IsValid() {
		row.OverlayIP = n.OverlayIP.String()
	}
	return row
}

// handleInternalNodes answers GET /v1/nodes on the control port for a
// caller that presented a leaf of this cluster.
func (rt *runtime) handleInternalNodes(w http.ResponseWriter, r *http.Request) {
	if r.TLS == nil {
		writeError(w, codes.Wrap(codes.PeerRoleDenied, fmt.Errorf("no TLS")))
		return
	}
	if _, _, _, ok := pki.PeerIdentity(*r.TLS); !ok {
		writeError(w, codes.Wrap(codes.PeerRoleDenied, fmt.Errorf("no client certificate of this cluster")))
		return
	}
	if err := rt.caughtUp(r.Context()); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, rt.nodeRows())
}

// remoteNodes asks the control nodes this worker knows, in order, over mTLS.
func (rt *runtime) remoteNodes(ctx context.Context) ([]apitype.Node, error) {
	var rows []apitype.Node
	return rows, rt.askSeeds(ctx, internalNodesPath, &rows)
}

// internalClient is the mTLS client for other control nodes' internal API.
// One per runtime, so connections (and their TLS sessions) are reused: a
// follower's forwarded write costs a request, not a handshake.
func (rt *runtime) internalClient() (*http.Client, error) {
	rt.clientOnce.Do(func() {
		conf, err := pki.ClientTLSConfig(rt.identity(), pki.RoleControl)
		if err != nil {
			rt.clientErr = err
			return
		}
		rt.client = &http.Client{Transport: &http.Transport{TLSClientConfig: conf, MaxIdleConnsPerHost: 4,
			IdleConnTimeout: 90 * time.Second, ForceAttemptHTTP2: false}}
	})
	return rt.client, rt.clientErr
}

func (a *Agent) tokens(ctx context.Context) ([]apitype.Token, error) {
	rt, err := a.running()
	if err != nil {
		return nil, err
	}
	if rt.raft == nil {
		return nil, codes.Wrap(codes.NotControl, fmt.Errorf("tokens are listed on control nodes"))
	}
	if err := rt.freshRead(ctx); err != nil {
		return nil, err
	}
	now := a.d.Now()
	out := []apitype.Token{}
	for _, t := range rt.raft.FSM().Tokens() {
		st := "unused"
		switch {
		case t.Consumed():
			st = "used"
		case !now.Before(t.Expires):
			st = "expired"
		}
		row := apitype.Token{ID: t.Hash.String()[:12], Name: t.Name, Role: string(t.Role), Addr: t.Addr,
			Created: t.Created, Expires: t.Expires, MintedBy: t.MintedBy, State: st}
		if t.Consumed() {
			if n, ok := rt.raft.FSM().Node(t.ConsumedBy); ok {
				row.ConsumedBy = n.Name
			} else {
				row.ConsumedBy = t.ConsumedBy
			}
		}
		out = append(out, row)
	}
	return out, nil
}
