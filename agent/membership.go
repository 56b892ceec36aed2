package agent

import (
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/desired"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/pki"
)

// Serf tags every member carries.
const (
	tagRole       = "role"
	tagID         = "id"
	tagOverlay    = "ovl"
	tagNebulaPort = "nport"
	tagVersion    = "ver"
	// tagKeyring is state.KeyringID of the gossip keys the member runs:
	// how it reports a key rotation step done (never a key).
	tagKeyring = "kr"
)

const serfDir = "serf"

// startGossip starts serf with the cluster gossip key and this node's tags,
// then joins the peers it knows (a restarted node also rejoins through its
// serf snapshot).
func (a *Agent) startGossip(ctx context.Context, rt *runtime) error {
	cfg := a.cfg.gossipConfig(rt.facts, a.d.Version)
	if err := os.MkdirAll(filepath.Dir(cfg.SnapshotPath), 0o700); err != nil {
		return codes.Wrap(codes.StateDir, err)
	}
	cfg.Log = a.log
	g, err := gossip.New(cfg)
	if err != nil {
		return err
	}
	rt.gossip = g
	rt.keys.id = state.KeyringID(cfg.Keys)
	rt.rejoin(ctx)
	return nil
}

// serfPeers are the gossip endpoints this node knows besides its own: the
// active nodes from raft (control nodes), the active control nodes of the
// node list (workers), and those the join response named.
func (rt *runtime) serfPeers() []string {
	var peers []string
	if rt.ctl != nil {
		for _, n := range rt.ctl.Raft().FSM().Nodes() {
			if n.ID != rt.facts.NodeID && n.SerfAddr != "" && n.State == state.NodeActive {
				peers = append(peers, n.SerfAddr)
			}
		}
	} else if list, ok := rt.nodeList(); ok {
		for _, n := range list {
			if n.ID != rt.facts.NodeID && n.SerfAddr != "" && n.Active() && n.Role == string(pki.RoleControl) {
				peers = append(peers, n.SerfAddr)
			}
		}
	}
	for _, p := range rt.facts.SerfPeers {
		if !slices.Contains(peers, p) && p != rt.selfSerf() {
			peers = append(peers, p)
		}
	}
	return peers
}

func (rt *runtime) selfSerf() string {
	return net.JoinHostPort(rt.facts.Underlay.String(), strconv.Itoa(rt.ports.Gossip))
}

// rejoin joins the known peers when this node sees no one else; it is
// called at start and on every reconcile tick, so a node that came up while
// its peers were down finds them later without operator action.
func (rt *runtime) rejoin(ctx context.Context) {
	if len(rt.gossip.Members()) > 1 {
		return
	}
	peers := rt.serfPeers()
	if len(peers) == 0 {
		return
	}
	jctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if n, err := rt.gossip.Join(jctx, peers); err != nil {
		rt.log.Warn("gossip join failed", "code", codes.OrInternal(err), "peers", peers, "err", err)
	} else {
		rt.log.Debug("gossip joined", "contacted", n)
	}
}

// overlayInputs gathers what this node knows about the others for
// desired.Compute: the active records (raft's FSM on a control node, the
// node list on a worker), the join response's lighthouses (used only
// before a worker's first list), gossip members as their tags describe
// them (desired takes only their liveness), and the revocation list.
func (rt *runtime) overlayInputs() desired.Inputs {
	rev := rt.revocations()
	in := desired.Inputs{SelfName: rt.facts.Name, SelfOverlay: rt.overlayAddr(), Gone: rev.Gone, Blocklist: rev.Fingerprints}
	in.Records, in.RecordsKnown = rt.records()
	for _, l := range rt.facts.Lighthouses {
		ap, _ := netip.ParseAddrPort(l.Underlay) // invalid when unparsable: skipped
		in.Lighthouses = append(in.Lighthouses, desired.Lighthouse{Overlay: l.OverlayIP, Underlay: ap})
	}
	if rt.gossip == nil {
		return in
	}
	for _, m := range rt.gossip.Members() {
		dm := desired.Member{ID: m.Tags[tagID], Name: m.Name, Role: pki.Role(m.Tags[tagRole]), Status: m.Status}
		dm.Overlay, _ = netip.ParseAddr(m.Tags[tagOverlay])
		if port, err := strconv.Atoi(m.Tags[tagNebulaPort]); err == nil && port > 0 && port <= 65535 {
			dm.Underlay = netip.AddrPortFrom(m.Addr.Addr(), uint16(port))
		}
		in.Members = append(in.Members, dm)
	}
	return in
}

// keyReports are the gossip members' keyring reports (their tags), for
// a rotation this node runs.
func (rt *runtime) keyReports() []control.KeyReport {
	var out []control.KeyReport
	for _, m := range rt.gossip.Members() {
		out = append(out, control.KeyReport{Name: m.Name, ID: m.Tags[tagID], Alive: m.Status == gossip.StatusAlive,
			Keyring: m.Tags[tagKeyring]})
	}
	return out
}
