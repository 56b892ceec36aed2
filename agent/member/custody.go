package member

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// loadCA loads the CA keys in the state dir's ca/ (and ca/next/, the
// next CA of a rotation; loadCAs), if there are any: the CA holder's
// (node.json says so: keys that do not load stop the start,
// StateCorrupt), or a copy a custody move left (ignored with a warning if
// it does not load). Either way the control plane signs with them only
// while raft's record names this node (control.Plane.FollowCustody).
func (rt *Runtime) loadCA() (cur, next *pki.CA, err error) {
	dir := filepath.Join(rt.cfg.StateDir, statedir.CADir)
	if err := pki.RemoveCADirLeftovers(dir); err != nil { // a custody write killed half way
		rt.log.Warn("leftovers of an interrupted CA write not removed", "code", codes.StateDir, "err", err)
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) && !rt.facts.CAHolder {
		return nil, nil, nil
	}
	cur, next, err = loadCAs(rt.cfg.StateDir)
	if err != nil {
		if rt.facts.CAHolder {
			return nil, nil, statedir.Corrupt(err)
		}
		rt.log.Warn("a CA copy that does not load is ignored", "code", codes.StateCorrupt, "dir", dir, "err", err)
		return nil, nil, nil
	}
	return cur, next, nil
}

// holdsCA reports whether this node holds the CA: raft's record on a
// control node, node.json on one whose raft has no record yet.
func (rt *Runtime) HoldsCA() bool {
	if rt.ctl != nil {
		if c, ok := rt.ctl.Raft().FSM().Cluster(); ok {
			return c.CAHolder == rt.facts.NodeID
		}
	}
	return rt.facts.CAHolder
}

// followCustody (reconcile loop) has the control plane follow the
// record's CA holder (load, or release this node's copy) and keeps
// node.json's ca_holder in step with it. A failed step leaves node.json
// as it was, so a node still holding a copy is still marked.
func (rt *Runtime) followCustody(ctx context.Context) {
	holder, err := rt.ctl.FollowCustody(ctx)
	if errors.Is(err, control.ErrCustodyUnknown) {
		return // raft has not replayed its log yet: node.json stays as it is
	}
	if err != nil {
		rt.log.Warn("CA custody not followed yet", "code", codes.OrInternal(err), "err", err)
		return
	}
	if holder == rt.facts.CAHolder {
		return
	}
	rt.facts.CAHolder = holder
	if err := statedir.Save(rt.stateDir, rt.facts); err != nil {
		rt.log.Warn("node.json not updated with the CA holder", "code", codes.OrInternal(err), "err", err)
		return
	}
	rt.log.Info("node.json follows the CA holder on record", "ca_holder", holder)
}
