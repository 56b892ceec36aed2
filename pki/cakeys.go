package pki

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// CANextDir is where, inside a CA directory, the CA holder keeps the next
// CA's key pair during a CA rotation: the same files as the directory
// itself (CA.Save, LoadCA). A custody move (SaveCAKeys) and a sealed
// backup (CABackup.Next) carry it with the current pair.
const CANextDir = "next"

// LoadCAKeys loads a CA directory's key pairs: dir itself, and dir/next/
// when a rotation left one (nil otherwise). A dir that does not load
// while dir/next/ does (a crash while the finished rotation's pair was
// copied over dir) is read from dir/next/ alone, returned as cur; nothing
// is rewritten here. The caller picks the pair to sign with by the
// fingerprint raft records.
func LoadCAKeys(dir string) (cur, next *CA, err error) {
	nextDir := filepath.Join(dir, CANextDir)
	cur, err = LoadCA(dir)
	next, nerr := LoadCA(nextDir)
	if nerr != nil && !errors.Is(nerr, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("%s: %w", nextDir, nerr)
	}
	if err != nil {
		if next == nil {
			return nil, nil, fmt.Errorf("%s: %w", dir, err)
		}
		return next, nil, nil
	}
	return cur, next, nil
}
