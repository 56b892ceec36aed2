package statedir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/meshd/meshd/codes"
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
