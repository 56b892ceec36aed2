package statedir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// ExitFile records the exit node this node sends its default route
// through (`meshctl exit use NODE`, issue 33), so a restart keeps it;
// absent when it uses none. It holds a node name only (0600 like the rest
// of the state dir).
const ExitFile = "exit.json"

type exitChoice struct {
	Node string `json:"node"`
}

// LoadExit is the exit node recorded in stateDir, "" for none.
func LoadExit(stateDir string) (string, error) {
	path := filepath.Join(stateDir, ExitFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", codes.Wrap(codes.StateDir, err)
	}
	var c exitChoice
	if err := json.Unmarshal(b, &c); err != nil {
		return "", codes.Wrap(codes.StateCorrupt, fmt.Errorf("%s: %w", path, err))
	}
	return c.Node, nil
}

// SaveExit records node as this node's exit node; "" removes the record.
func SaveExit(stateDir, node string) error {
	path := filepath.Join(stateDir, ExitFile)
	if node == "" {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return WriteErr(err)
		}
		return nil
	}
	b, err := json.Marshal(exitChoice{Node: node})
	if err != nil {
		return err
	}
	if err := pki.WriteFileAtomic(path, b, 0o600); err != nil {
		return WriteErr(err)
	}
	return nil
}
