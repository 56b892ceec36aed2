package member

import (
	"context"
	"encoding/base64"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/desired"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/agent/statedir"
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

// startGossip starts serf with the cluster gossip key and this node's tags,
// then joins the peers it knows (a restarted node also rejoins through its
// serf snapshot).
func (ms *membership) startGossip(ctx context.Context) error {
	cfg := gossipConfig(ms.cfg, ms.facts, ms.version)
	if ms.ov.meshBase.Userspace {
		cfg.Network = ms.mesh // the overlay's own sockets (mesh.Mesh.Listen, ListenPacket)
	}
	if err := os.MkdirAll(filepath.Dir(cfg.SnapshotPath), 0o700); err != nil {
		return codes.Wrap(codes.StateDir, err)
	}
	cfg.Log = ms.log
	g, err := gossip.New(cfg)
	if err != nil {
		return err
	}
	ms.gossip = g
	ms.keys.id = state.KeyringID(cfg.Keys)
	rctx, cancel := context.WithTimeout(ctx, startRejoin)
	defer cancel()
	ms.rejoin(rctx)
	return nil
}

// startRejoin bounds the rejoin at start: a peer that is up answers its
// probe within a handshake (milliseconds here), and one that is down
// would hold the start for the probe's whole bound (reachProbe, 2 s),
// which a restart after a power loss paid at every node in turn (e2e.
// TestPowerLoss: whole again 5.6-10.3 s against its 10 s bound, 2 s of
// each control node's start spent so). runRejoin looks again rejoinFirst
// after start.
const startRejoin = 500 * time.Millisecond

// serfPeers are the gossip endpoints this node knows besides its own:
// the cluster's (clusterFacts.SerfPeers: every active node on a control
// node, the active control nodes on a worker) and those the join
// response named.
func (ms *membership) serfPeers() []string {
	peers := ms.cluster.SerfPeers()
	for _, p := range ms.facts.SerfPeers {
		if !slices.Contains(peers, p) && p != ms.selfSerf() {
			peers = append(peers, p)
		}
	}
	return peers
}

func (ms *membership) selfSerf() string {
	return net.JoinHostPort(ms.facts.Overlay.Addr().String(), strconv.Itoa(ms.ports.Gossip))
}

// rejoin joins the known peers gossip does not show alive (missingPeers).
// It runs at start and from runRejoin, so a node that came up while its
// peers were down finds them later without operator action, and so does
// an island: nodes that restarted together before their seeds (a power
// loss) each rejoin only the first previous member that answers (serf's
// snapshot rejoin), and could gossip among themselves while the rest of
// the cluster formed apart. It reports whether a peer was missing.
//
// Gossip rides the overlay, where a peer that is down sends no reset: a
// join would wait memberlist's TCP timeout (10 s) for each such peer in
// turn, holding serf's join lock. So the missing peers are first probed
// all at once (reachable), and only those that answer are joined, each
// as soon as it answers: the nearest first. One push-pull with a member
// brings the whole membership, so the peers farther away are then seen
// alive, no longer missing, and neither joined nor waited for. (A worker
// across TestSites' 100 ms round trip from two of its three control
// nodes used to wait for every probe and then push-pull with each in
// turn: about 0.4 s of its join.)
//
// A pass probes at most rejoinPerPass of the missing peers (rejoinTurn):
// the control nodes first, then a window that moves on at each pass.
func (ms *membership) rejoin(ctx context.Context) bool {
	missing := ms.missingPeers()
	if len(missing) == 0 {
		return false
	}
	peers := ms.turn.pick(missing)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var joined []string
	for p := range ms.reachable(pctx, peers) {
		missing := ms.missingPeers()
		if !slices.Contains(missing, p) {
			continue
		}
		jctx, jcancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := ms.gossip.Join(jctx, []string{p})
		jcancel()
		if err != nil {
			ms.log.Debug("gossip join failed", "code", codes.OrInternal(err), "peer", p, "err", err)
			continue
		}
		ms.log.Info("gossip joined a known peer it did not see", "peer", p, "contacted", n)
		joined = append(joined, p)
		if len(ms.missingPeers()) == 0 {
			cancel() // every other peer is seen alive now: no need to wait for its probe
		}
	}
	if len(joined) == 0 {
		ms.log.Debug("gossip peers missing, none joined (none reachable over the overlay yet)", "missing", len(missing), "probed", peers)
	}
	return true
}

// reachProbe bounds one probe of a missing peer's gossip port: Nebula's
// handshake with a peer that is up takes well under a second.
const reachProbe = 2 * time.Second

// reachable probes the peers (ip:port) all at once and yields each that
// accepts (or refuses) a TCP connection within reachProbe, as it answers;
// a peer outside the overlay (the previous release's underlay) is yielded
// first, without a probe. The probes end when ctx does, or the caller
// stops reading; every probe's goroutine has ended when it returns.
func (ms *membership) reachable(ctx context.Context, peers []string) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		// Every peer sends exactly one answer: itself when it is up, ""
		// when not.
		answers := make(chan string, len(peers))
		var wg sync.WaitGroup
		defer wg.Wait() // deferred first, so it runs after cancel: a caller that stops reading ends the probes
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		for _, p := range peers {
			ap, err := netip.ParseAddrPort(p)
			if err != nil || !ms.facts.Overlay.Masked().Contains(ap.Addr().Unmap()) {
				answers <- p
				continue
			}
			wg.Go(func() {
				pctx, cancel := context.WithTimeout(ctx, reachProbe)
				defer cancel()
				c, err := ms.dialOverlay(pctx, p)
				if err == nil {
					_ = c.Close()
				}
				if err == nil || refused(err) {
					answers <- p
				} else {
					answers <- ""
				}
			})
		}
		for range peers {
			select {
			case p := <-answers:
				if p != "" && !yield(p) {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}
}

// missingPeers are the known peers (serfPeers: the active records' gossip
// addresses, the control nodes' for a worker) that gossip does not show
// alive or suspect.
func (ms *membership) missingPeers() []string {
	seen := map[string]bool{}
	for _, m := range ms.gossip.Members() {
		if m.Status == gossip.StatusAlive || m.Status == gossip.StatusSuspect {
			seen[m.Addr.String()] = true
		}
	}
	var missing []string
	for _, p := range ms.serfPeers() {
		if ap, err := netip.ParseAddrPort(p); err == nil && seen[ap.String()] {
			continue
		}
		missing = append(missing, p)
	}
	return missing
}

// rejoinFirst is how soon runRejoin looks again after a rejoin that found
// a peer missing; each further miss doubles it, up to the reconcile
// interval. It is also the least time between two looks.
const rejoinFirst = time.Second

// runRejoin rejoins missing peers (rejoin) with a backoff from rejoinFirst
// to most: quickly after a power loss, rarely while a peer stays down.
// While none is missing it looks when gossip changes (a member failed or
// left: gossip.Changes), at most once every rejoinFirst, and every most as
// a safety net; it used to look every second, copying every member and
// every record each time (issue 54).
func (ms *membership) runRejoin(ctx context.Context, most time.Duration) {
	miss := time.Duration(0) // the wait after a look that found a peer missing; 0: none was
	wait := min(rejoinFirst, most)
	var last time.Time // the last look
	for {
		var changed <-chan struct{} // nil while peers are missing: the backoff paces the looks
		if miss == 0 {
			changed = ms.gossip.Changes()
		}
		if !pause(ctx, wait, changed) {
			return
		}
		if gap := min(rejoinFirst, most) - time.Since(last); gap > 0 && !pause(ctx, gap, nil) {
			return // a change soon after a look waits out the least gap
		}
		last = time.Now()
		if ms.rejoin(ctx) {
			miss = min(max(2*miss, rejoinFirst), most)
			wait = miss
		} else {
			miss, wait = 0, most
		}
	}
}

// pause waits d, or until wake closes; false when ctx ended first.
func pause(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-wake:
	}
	return true
}

// overlayInputs gathers what this node knows about the others for
// desired.Compute: the active records (raft's FSM on a control node, the
// node list on a worker), the join response's lighthouses (used only
// before a worker's first list), gossip members as their tags describe
// them (desired takes only their liveness), and the revocation list.
func (nd *node) overlayInputs() desired.Inputs {
	in := nd.baseInputs()
	in.Records, in.RecordsKnown = nd.records()
	in.Members = nd.gossipMembers()
	return in
}

// baseInputs are overlayInputs without the records and gossip members:
// what an overlay pass that hands the tracker only the records that
// changed reads (overlaypass.go), at a cost that does not grow with the
// records.
func (nd *node) baseInputs() desired.Inputs {
	rev := nd.cluster.Revocations()
	in := desired.Inputs{SelfName: nd.facts.Name, SelfOverlay: nd.overlayAddr(), Gone: rev.Gone, Blocklist: rev.Fingerprints,
		SelfNoNAT: nd.nat.get() == natOpen, SelfOverlay6: nd.ownOverlay6()}
	in.SelfRoutes, in.SelfAsked = nd.ownRoutes()
	in.SelfUnderlay, in.Exit, in.Seeds = nd.facts.Underlay, nd.exitChoice(), nd.seedAddrs()
	for _, l := range nd.facts.Lighthouses {
		ap, _ := netip.ParseAddrPort(l.Underlay) // invalid when unparsable: skipped
		in.Lighthouses = append(in.Lighthouses, desired.Lighthouse{Overlay: l.OverlayIP, Underlay: ap})
	}
	return in
}

// gossipMembers are the gossip members as desired reads them.
func (nd *node) gossipMembers() []desired.Member {
	src := nd.peers() // liveness.go
	if src == nil {
		return nil
	}
	var out []desired.Member
	for _, m := range src.Members() {
		out = append(out, asMember(m))
	}
	return out
}

// poolMembers are the members of the gossip pool this node is in, as
// desired reads them: what the overlay pass reports unmatched to a record
// (reportIgnored) and annotates its peers with. Not the liveness source's
// members (gossipMembers): with a worker's node list as the source those
// are every record, and the pass would copy all of them per change
// (issue 54: 2.8 ms at 10,000) to report what cannot be unmatched.
func (nd *node) poolMembers() []desired.Member {
	if nd.gossip == nil {
		return nil
	}
	var out []desired.Member
	for _, m := range nd.gossip.Members() {
		out = append(out, asMember(m))
	}
	return out
}

// asMember is a gossip member as desired reads it: its tags and the
// address it gossips from.
func asMember(m gossip.Member) desired.Member {
	dm := desired.Member{ID: m.Tags[tagID], Name: m.Name, Role: pki.Role(m.Tags[tagRole]), Status: m.Status,
		Addr: m.Addr.Addr().Unmap()}
	dm.Overlay, _ = netip.ParseAddr(m.Tags[tagOverlay])
	return dm
}

// counted are the gossip members that count (desired.Counts: this node,
// and members matching an active record from its overlay address): the
// only ones whose versions and keyring and CA reports are read.
func (ms *membership) counted() []gossip.Member {
	src := ms.peers() // liveness.go
	if src == nil {
		return nil
	}
	counts := desired.NewMatcher(ms.overlayInputs())
	var out []gossip.Member
	for _, m := range src.Members() {
		if counts.Counts(asMember(m)) {
			out = append(out, m)
		}
	}
	return out
}

// keyReports are the keyring and CA reports (their tags) of the gossip
// members that count, for a rotation this node runs: a key holder
// gossiping as a node from anywhere but that node's overlay address
// reports nothing (issue 27). Tags are hints; the control plane counts a
// CA report only with its signature (tagCASig), a keyring step only from
// a signed answer.
func (ms *membership) keyReports() []control.KeyReport {
	var out []control.KeyReport
	for _, m := range ms.counted() {
		r := control.KeyReport{Name: m.Name, ID: m.Tags[tagID], Alive: m.Status == gossip.StatusAlive,
			Keyring: m.Tags[tagKeyring], CA: m.Tags[tagCA],
			Legacy: !ms.facts.Overlay.Masked().Contains(m.Addr.Addr().Unmap())}
		r.CASig, _ = base64.RawStdEncoding.DecodeString(m.Tags[tagCASig]) // nil when absent or garbled: verifies nothing
		out = append(out, r)
	}
	return out
}

// gossipConfig is serf's config: bound to this node's overlay address
// (gossip rides the overlay: DESIGN §11), the cluster key, this node's
// tags, its snapshot under the state dir. The caller adds the logger, and
// in userspace mode the overlay's sockets.
func gossipConfig(c config.File, f *statedir.Facts, version string) gossip.Config {
	g := gossip.DefaultConfig()
	g.Name = f.Name
	g.BindAddr, g.BindPort = f.Overlay.Addr().String(), c.Ports.Gossip
	g.AdvertiseAddr, g.AdvertisePort = g.BindAddr, c.Ports.Gossip
	g.Overlay = f.Overlay.Masked()
	g.Keys = f.GossipKeys
	g.Tags = map[string]string{
		tagRole: string(f.Role), tagID: f.NodeID, tagOverlay: f.Overlay.Addr().String(),
		tagNebulaPort: strconv.Itoa(c.Ports.Nebula), tagVersion: version, tagKeyring: state.KeyringID(f.GossipKeys),
	}
	g.SnapshotPath = filepath.Join(c.StateDir, statedir.SerfDir, "snapshot")
	g.Fast = c.Timers == config.TimersFast
	return g
}
