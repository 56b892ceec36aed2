package statedir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// FactsVersion is the format version of node.json.
const FactsVersion = 1

// Facts is this node's identity in its cluster and what it knows of the
// cluster, persisted as <state>/node.json (0600: it holds the gossip key).
// It is written last by init and join: its presence means "member".
type Facts struct {
	Version     int                 `json:"version"`
	NodeID      string              `json:"node_id"`
	Name        string              `json:"name"`
	Role        pki.Role            `json:"role"`
	CAHolder    bool                `json:"ca_holder"`
	ClusterID   string              `json:"cluster_id"`
	ClusterName string              `json:"cluster_name"`
	Overlay     netip.Prefix        `json:"overlay_ip"` // address with the cluster prefix length
	Underlay    netip.Addr          `json:"underlay"`
	Seeds       []string            `json:"seeds"`
	SerfPeers   []string            `json:"serf_peers"`
	Lighthouses []enroll.Lighthouse `json:"lighthouses"`
	RaftPeers   []enroll.RaftPeer   `json:"raft_peers,omitempty"`
	GossipKeys  [][]byte            `json:"gossip_keys"`
	Joined      time.Time           `json:"joined"`
	// MachineID is the hash of the /etc/machine-id of the machine that
	// ran init or join (MachineIDHash), never the id itself; "" when it had
	// none, or in a state dir from before meshd recorded it.
	MachineID string `json:"machine_id_sha256,omitempty"`
	// HomeSeed is the seed this node enrolled through: a worker asks it
	// first (control.HomeFirst), as it is on the worker's own site when
	// the operator admitted it there. "" in a state dir from before meshd
	// recorded it, or on a node that ran init.
	HomeSeed string `json:"home_seed,omitempty"`
}

func (f Facts) String() string {
	return fmt.Sprintf("node %s (%s) %s in cluster %s", f.Name, f.NodeID, f.Role, f.ClusterName)
}

// Layout of the state directory.
const (
	NodeFile    = "node.json"
	IdentityDir = "identity"
	CADir       = "ca"
	RaftDir     = "raft"
	SerfDir     = "serf"       // serf's snapshot
	NodesFile   = "nodes.json" // a worker's last node list
)

func Load(stateDir string) (*Facts, error) {
	b, err := os.ReadFile(filepath.Join(stateDir, NodeFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, codes.Wrap(codes.StateDir, err)
	}
	if err := CheckPrivate(filepath.Join(stateDir, NodeFile)); err != nil {
		return nil, err
	}
	var f Facts
	path := filepath.Join(stateDir, NodeFile)
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, codes.Wrap(codes.StateCorrupt, fmt.Errorf("%s: %w", path, err))
	}
	if f.Version != FactsVersion {
		return nil, codes.Wrap(codes.StateDir, fmt.Errorf("%s: unknown version %d", path, f.Version))
	}

	return &f, nil
}

func Save(stateDir string, f *Facts) error {
	f.Version = FactsVersion
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := pki.WriteFileAtomic(filepath.Join(stateDir, NodeFile), b, 0o600); err != nil {
		return WriteErr(err)
	}
	return nil
}

// WriteErr gives a failed write to the state dir its code: DiskFull
// when the filesystem has no room (the error names the path), StateDir
// otherwise.
func WriteErr(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return codes.Wrap(codes.DiskFull, err)
	}
	return codes.Wrap(codes.StateDir, err)
}

// Corrupt gives a state file that failed to load codes.StateCorrupt, unless
// the failure already has a code (KeyPermissions: the file is fine, its
// mode is not).
func Corrupt(err error) error {
	if err == nil || codes.Of(err) != "" {
		return err
	}
	return codes.Wrap(codes.StateCorrupt, err)
}

// CheckPrivate refuses a secret-bearing file that group or others can read.
func CheckPrivate(path string) error {
	_, err := pki.ReadKeyFile(path)
	return err
}

// Wipe removes everything meshd keeps in stateDir, keeping the dir.
// It refuses (codes.CAHolderStays) while stateDir keeps CA keys: only
// WipeFailedInit, taking back an init that did not finish, removes ca/.
func Wipe(stateDir string) error {
	if err := RefuseCAWipe(stateDir, "wiping the state dir"); err != nil {
		return err
	}
	return remove(stateDir)
}

// WipeFailedInit takes back what a failed init wrote, its new CA keys
// included: init refused to start over a state dir with CA keys, so any
// there are its own and sign nothing yet.
func WipeFailedInit(stateDir string) error {
	return remove(stateDir)
}

func remove(stateDir string) error {
	for _, name := range []string{NodeFile, IdentityDir, CADir, RaftDir, SerfDir, NodesFile} {
		if err := os.RemoveAll(filepath.Join(stateDir, name)); err != nil {
			return codes.Wrap(codes.StateDir, err)
		}
	}
	if err := pki.RemoveCADirLeftovers(filepath.Join(stateDir, CADir)); err != nil {
		return codes.Wrap(codes.StateDir, err)
	}
	return nil
}

// Ensure creates stateDir 0700, or refuses one group/world accessible.
func Ensure(stateDir string) error {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return codes.Wrap(codes.StateDir, err)
	}
	st, err := os.Stat(stateDir)
	if err != nil {
		return codes.Wrap(codes.StateDir, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return codes.Wrap(codes.StateDir, fmt.Errorf("state dir %s has mode %o; want 0700", stateDir, st.Mode().Perm()))
	}
	return nil
}
