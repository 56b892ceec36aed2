package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/desired"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// A worker's last node list is saved in statedir.NodesFile, so a restarted
// worker follows raft's records (and checks control nodes against them)
// from its start.

// workerNodes is a worker's node list, fetched over mTLS from a control
// node: the records that decide its peers, lighthouses and seeds, and
// the TLS leaves a control node may present to it.
type workerNodes struct {
	// fetching is held through each refresh: one fetch at a time. The
	// join's confirmation and the reconcile loop both refresh; with a
	// fetch taking a second under a 50-join burst, they used to fetch
	// side by side (119 strict reads for 50 joins).
	fetching sync.Mutex
	mu       sync.Mutex
	list     []control.NodeRecord
	have     bool // a list was fetched (now or before a restart)
	fetched  time.Time
	tried    time.Time // the last attempt, which may have failed
	err      error     // why the last attempt failed; nil after one that did not
}

// nodeListRetry spaces attempts after one that failed (or returned a list
// without this node, as a lagging control node may): a joining worker
// asks every 20 ms while it waits for its confirmation, and 50 of them at
// once kept every control node busy forwarding read indexes.
const nodeListRetry = 200 * time.Millisecond

// nodeListErr is why the last attempt to refresh the node list failed,
// or nil.
func (rt *runtime) nodeListErr() error {
	rt.nodes.mu.Lock()
	defer rt.nodes.mu.Unlock()
	return rt.nodes.err
}

// nodeList is a worker's current list; ok is false before the first one.
func (rt *runtime) nodeList() ([]control.NodeRecord, bool) {
	rt.nodes.mu.Lock()
	defer rt.nodes.mu.Unlock()
	return rt.nodes.list, rt.nodes.have
}

// loadNodeList reads the list a worker saved before a restart; a missing
// file means none yet. A control node has raft instead.
func (rt *runtime) loadNodeList() error {
	if rt.ctl != nil {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(rt.stateDir, statedir.NodesFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return codes.Wrap(codes.StateDir, err)
	}
	var list []control.NodeRecord
	if err := json.Unmarshal(b, &list); err != nil {
		rt.log.Warn("ignoring an unreadable saved node list; waiting for a fresh one", "code", codes.StateDir, "err", err)
		return nil
	}
	rt.setNodeList(list, time.Time{})
	return nil
}

// refreshNodeList updates a worker's list from a control node: at once
// when told something changed, otherwise at most once a second. The new
// list is saved (0600) and from then on decides which control leaves the
// worker accepts.
func (rt *runtime) refreshNodeList(ctx context.Context, told bool) {
	if rt.ctl != nil {
		return
	}
	// After a fetch in flight ends, a call that was told of a change
	// fetches again (that fetch may have started before the change); one
	// that was not finds the list fresh.
	rt.nodes.fetching.Lock()
	defer rt.nodes.fetching.Unlock()
	rt.nodes.mu.Lock()
	due := told || time.Since(rt.nodes.fetched) >= time.Second && time.Since(rt.nodes.tried) >= nodeListRetry
	if due {
		rt.nodes.tried = time.Now()
	}
	rt.nodes.mu.Unlock()
	if !due {
		return
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	var list []control.NodeRecord
	err := rt.client.AskSeeds(fctx, rt.seeds(), control.PathNodes+control.StrictQuery, &list)
	if err == nil && !slices.ContainsFunc(list, func(r control.NodeRecord) bool { return r.ID == rt.facts.NodeID }) {
		err = errors.New("a node list without this node (from a control node behind the leader); not adopted")
	}
	rt.nodes.mu.Lock()
	rt.nodes.err = err
	rt.nodes.mu.Unlock()
	if err != nil {
		rt.log.Debug("node list not refreshed", "took", time.Since(start), "err", err)
		return
	}
	rt.log.Debug("node list refreshed", "took", time.Since(start), "records", len(list), "told", told)
	rt.setNodeList(list, time.Now())
	b, err := json.MarshalIndent(list, "", "  ")
	if err == nil {
		err = pki.WriteFileAtomic(filepath.Join(rt.stateDir, statedir.NodesFile), b, 0o600)
	}
	if err != nil {
		rt.log.Warn("could not save the node list", "code", codes.StateDir, "err", err)
	}
}

func (rt *runtime) setNodeList(list []control.NodeRecord, at time.Time) {
	rt.nodes.mu.Lock()
	changed := !rt.nodes.have || !slices.EqualFunc(list, rt.nodes.list, sameRecord)
	rt.nodes.list, rt.nodes.have = list, true
	if !at.IsZero() {
		rt.nodes.fetched = at
	}
	rt.nodes.mu.Unlock()
	if changed {
		rt.client.CheckServers(control.ActiveControlLeaves(list))
	}
}

func sameRecord(a, b control.NodeRecord) bool {
	j1, _ := json.Marshal(a)
	j2, _ := json.Marshal(b)
	return string(j1) == string(j2)
}

// seeds are the control nodes this node asks: on a worker with a node
// list, its active control records' control addresses; otherwise (a
// control node, or a worker before its first list) the seeds the join
// response named. A worker asks them from one its id picks
// (control.Spread).
func (rt *runtime) seeds() []string {
	return control.Spread(rt.seedList(), rt.facts.NodeID)
}

func (rt *runtime) seedList() []string {
	list, ok := rt.nodeList()
	if rt.ctl != nil || !ok {
		return rt.facts.Seeds
	}
	var out []string
	for _, r := range list {
		if r.Active() && r.Role == string(pki.RoleControl) && r.EnrollAddr != "" && r.ID != rt.facts.NodeID {
			out = append(out, r.EnrollAddr)
		}
	}
	if len(out) == 0 {
		return rt.facts.Seeds
	}
	return out
}

// records are the other nodes' active records for desired.Compute: the
// FSM on a control node, the node list on a worker. ok is false on a
// worker before its first list.
func (rt *runtime) records() ([]desired.Record, bool) {
	var out []desired.Record
	add := func(id, name string, role pki.Role, st state.NodeState, ovl netip.Addr, underlay string, port int) {
		if id == rt.facts.NodeID || st != state.NodeActive {
			return
		}
		r := desired.Record{ID: id, Name: name, Role: role, Overlay: ovl}
		if ip, err := netip.ParseAddr(underlay); err == nil && port > 0 && port <= 65535 {
			r.Underlay = netip.AddrPortFrom(ip, uint16(port))
		}
		out = append(out, r)
	}
	if rt.ctl != nil {
		for _, n := range rt.ctl.Raft().FSM().Nodes() {
			add(n.ID, n.Name, n.Role, n.State, n.OverlayIP, n.Underlay, n.NebulaPort)
		}
		return out, true
	}
	list, ok := rt.nodeList()
	for _, n := range list {
		ovl, _ := netip.ParseAddr(n.OverlayIP)
		add(n.ID, n.Name, pki.Role(n.Role), state.NodeState(n.State), ovl, n.Underlay, n.NebulaPort)
	}
	return out, ok
}

// reportIgnored logs each gossip member desired ignored, once per member
// per change of what it claims, with codes.GossipMemberIgnored.
func (rt *runtime) reportIgnored(in desired.Inputs) {
	if !in.RecordsKnown {
		return
	}
	now := map[string]string{}
	for _, ig := range desired.Unmatched(in) {
		now[ig.Name] = fmt.Sprintf("%s|%s", ig.ID, ig.Reason)
	}
	rt.ignoredMu.Lock()
	defer rt.ignoredMu.Unlock()
	for name, why := range now {
		if rt.ignored[name] == why {
			continue
		}
		id, reason, _ := strings.Cut(why, "|")
		rt.log.Warn("gossip member ignored: raft decides, gossip only reports liveness", "code", codes.GossipMemberIgnored,
			"member", name, "member_id", id, "reason", reason)
	}
	rt.ignored = now
}
