package fetched

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// nodeList is the worker's node list: the records that decide its peers,
// lighthouses and seeds, and the TLS leaves a control node may present to
// it. It is saved in statedir.NodesFile, so a restarted worker follows
// raft's records (and checks control nodes against them) from its start.
type nodeList struct {
	mu   sync.Mutex
	have bool  // a list was fetched (now or before a restart)
	err  error // why the last attempt failed; nil after one that did not
	// The list itself (recordlog.go): the records by id, the list in
	// recordOrder as last built (shared once handed out), the ids changed
	// since with what that list holds for each (nil: none), the change
	// log, and what Seeds, SerfPeers and the revocations read, kept per
	// change.
	recs     map[string]control.NodeRecord
	list     []control.NodeRecord
	stale    map[string]*control.NodeRecord
	log      changeLog
	controls []control.NodeRecord // the control nodes' records, in recordOrder
	gone     []string             // ids of the records that left, were removed or failed (control.Gone), sorted
	builds   int                  // lists built whole or again (WatchStats.ListBuilds)
}

// nodeListRetry spaces strict changes after one that failed (or brought
// a list without this node, as a lagging control node may): a joining
// worker refreshes every 20 ms while it waits for its confirmation, and
// 50 of them at once kept every control node busy forwarding read
// indexes.
const nodeListRetry = 200 * time.Millisecond

// Records is the current node list, in recordOrder (shared: not to be
// changed); ok is false before the first one. After a change it copies
// the list once (recordlog.go): a consumer that follows every change
// asks RecordsSince instead.
func (c *Copies) Records() ([]control.NodeRecord, bool) {
	c.nodes.mu.Lock()
	defer c.nodes.mu.Unlock()
	return c.nodes.built(), c.nodes.have
}

// NodeListErr is why the last attempt to refresh the node list failed,
// or nil.
func (c *Copies) NodeListErr() error {
	c.nodes.mu.Lock()
	defer c.nodes.mu.Unlock()
	return c.nodes.err
}

// Load reads the list saved before a restart; a missing file means none
// yet, an unreadable one is logged and waits for a fresh list.
func (c *Copies) Load() error {
	b, err := os.ReadFile(filepath.Join(c.stateDir, statedir.NodesFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return codes.Wrap(codes.StateDir, err)
	}
	var list []control.NodeRecord
	if err := json.Unmarshal(b, &list); err != nil {
		c.log.Warn("ignoring an unreadable saved node list; waiting for a fresh one", "code", codes.StateDir, "err", err)
		return nil
	}
	c.adoptList(list)
	if i := slices.IndexFunc(list, func(r control.NodeRecord) bool { return r.ID == c.nodeID }); i >= 0 {
		c.judgeOwn(list[i], true)
	}
	return nil
}

// Seeds are the control nodes this worker asks: with a node list, its
// active control records' control addresses; before the first list (or
// with none listed) the seeds the join response named. The worker asks
// first the seed it enrolled through, then the rest from one its id
// picks (control.HomeFirst).
func (c *Copies) Seeds() []string {
	return control.HomeFirst(c.seedList(), c.home, c.nodeID)
}

func (c *Copies) seedList() []string {
	c.nodes.mu.Lock()
	list, ok := c.nodes.controls, c.nodes.have
	c.nodes.mu.Unlock()
	if !ok {
		return c.joinSeeds
	}
	var out []string
	for _, r := range list {
		if r.Active() && r.RoleOf() == pki.RoleControl && r.EnrollAddr != "" && r.ID != c.nodeID {
			out = append(out, r.EnrollAddr)
		}
	}
	if len(out) == 0 {
		return c.joinSeeds
	}
	return out
}

// SerfPeers are the gossip addresses on the overlay
// (control.NodeRecord.GossipPeer) of the active control nodes on the
// list: a worker rejoins gossip through them.
func (c *Copies) SerfPeers() []string {
	c.nodes.mu.Lock()
	list := c.nodes.controls
	c.nodes.mu.Unlock()
	var peers []string
	for _, n := range list {
		if g := n.GossipPeer(); n.ID != c.nodeID && g != "" && n.Active() && n.RoleOf() == pki.RoleControl {
			peers = append(peers, g)
		}
	}
	return peers
}
