package statedir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// HoldsCACopy reports whether stateDir keeps CA keys (its ca/ directory
// has anything in it): on the CA holder that is the cluster's only copy.
func HoldsCACopy(stateDir string) (bool, error) {
	entries, err := os.ReadDir(filepath.Join(stateDir, CADir))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, codes.Wrap(codes.StateDir, err)
	}
	return len(entries) > 0, nil
}

// RefuseCAWipe refuses, with codes.CAHolderStays, any command that would
// wipe stateDir while it keeps CA keys (init --force, join --force, a
// join over a state dir whose node.json is gone): whatever flag is given,
// the only copy of the CA is never deleted by a wipe.
func RefuseCAWipe(stateDir, what string) error {
	holds, err := HoldsCACopy(stateDir)
	if err != nil || !holds {
		return err
	}
	return codes.Wrap(codes.CAHolderStays, fmt.Errorf("%s would delete %s, the cluster's CA keys; --force does not override this",
		what, filepath.Join(stateDir, CADir)))
}

// ClearCANext empties ca/next/ before a new rotation saves its next CA
// there. A ca/next/ that holds the current CA (cur, hex) is the last
// rotation's, finished but not yet moved into ca/ (the member runtime's tidying): it is moved
// first, never deleted, since it may be the only copy of the CA's keys.
func ClearCANext(stateDir, cur string) error {
	dir := filepath.Join(stateDir, CADir)
	nextDir := filepath.Join(dir, pki.CANextDir)
	if next, err := pki.LoadCA(nextDir); err == nil && next.Fingerprint().String() == cur {
		if err := next.Save(dir); err != nil {
			return fmt.Errorf("move the current CA from %s into %s: %w", nextDir, dir, err)
		}
	}
	return os.RemoveAll(nextDir)
}
