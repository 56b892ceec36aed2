package statedir

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"

	"github.com/meshd/meshd/codes"
)

// A cloned machine (a VM image or disk copied with /var/lib/meshd in it)
// carries the original's keys and node id; two machines running one
// identity fight over its overlay IP and gossip name. node.json records a
// hash of /etc/machine-id at init and join (systemd gives every
// installation its own, and image preparation empties it so that a clone
// gets a new one at first boot), and a meshd whose machine-id no longer
// matches refuses to start gossip and the overlay (codes.ClonedIdentity).
//
// A machine without /etc/machine-id (many container images) records
// nothing: meshd must run there, and there is nothing to compare; it logs
// that clone detection is off. Once a hash is recorded, a machine-id that
// is missing or unreadable is refused like a different one: the node can
// no longer show it is the machine it was.

// DefaultMachineIDPath is where systemd keeps the machine's id.
const DefaultMachineIDPath = "/etc/machine-id"

// machineIDPrefix makes the hash meshd's own: it cannot be matched
// against another program's hash of the same id, and the id itself is
// never stored.
const machineIDPrefix = "meshd machine-id v1\x00"

// errNoMachineID: the machine has no (initialised) machine-id.
var errNoMachineID = errors.New("no machine-id")

// MachineIDHash is the hex SHA-256 of machineIDPrefix and the id in path.
// A missing, empty or "uninitialized" file is errNoMachineID.
func MachineIDHash(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%s: %w", path, errNoMachineID)
	}
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" || id == "uninitialized" {
		return "", fmt.Errorf("%s is empty: %w", path, errNoMachineID)
	}
	sum := sha256.Sum256([]byte(machineIDPrefix + id))
	return hex.EncodeToString(sum[:]), nil
}

// CheckMachine refuses facts recorded on another machine
// (codes.ClonedIdentity). A state dir from before meshd recorded the hash
// gets this machine's now, once.
func CheckMachine(stateDir string, f *Facts, path string, log *slog.Logger) error {
	h, err := MachineIDHash(path)
	if f.MachineID == "" {
		if err != nil {
			log.Warn("no machine-id to record; a copy of this node's state dir on another machine will not be detected", "err", err)
			return nil
		}
		f.MachineID = h
		if err := Save(stateDir, f); err != nil {
			return err
		}
		log.Info("recorded this machine's machine-id hash in node.json (first start since meshd records it)", "machine_id_sha256", h[:12])
		return nil
	}
	if err != nil {
		return codes.Wrap(codes.ClonedIdentity, fmt.Errorf("%s was recorded on a machine with a machine-id, and this machine's cannot be read: %w", f, err))
	}
	if h != f.MachineID {
		return codes.Wrap(codes.ClonedIdentity, fmt.Errorf("%s was recorded on machine %s…, this is machine %s… (hashes of %s)",
			f, f.MachineID[:min(12, len(f.MachineID))], h[:12], path))
	}
	return nil
}
