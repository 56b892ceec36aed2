package pki

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/meshd/meshd/codes"
)

// maxKeyFile bounds what ReadKeyFile reads: a PEM private key is a few
// hundred bytes, so anything near this size is not a key.
const maxKeyFile = 1 << 20

// WriteFileAtomic replaces path with data so that a crash leaves either the
// old file or the new one, never a mix: it writes a temporary file in the
// same directory, fsyncs it, sets perm, renames it over path and fsyncs the
// directory. A missing parent directory is created with mode 0700.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create directory for %s: %w", path, err)
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	// The temp file starts at 0600; set the final mode before any byte of a
	// world-readable file could be observed under its final name.
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := syncFile(f); err != nil {
		return fmt.Errorf("write %s: sync: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: close: %w", path, err)
	}
	if err := renameFile(tmp, path); err != nil {
		return fmt.Errorf("write %s: rename: %w", path, err)
	}
	return syncDir(dir)
}

// syncFile and renameFile are WriteFileAtomic's fsync and rename; tests of
// this package replace them to make either fail.
var (
	syncFile   = (*os.File).Sync
	renameFile = os.Rename
)

// syncDir makes a rename or removal in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// ReadKeyFile reads a private key file. A file that group or others may
// access (mode&0o077 != 0) is refused with codes.KeyPermissions and never
// read. Errors never carry the file's contents.
func ReadKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read key: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read key: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("key file %s is not a regular file", path)
	}
	if mode := st.Mode().Perm(); mode&0o077 != 0 {
		return nil, codes.Wrap(codes.KeyPermissions, fmt.Errorf("key file %s has mode %o", path, mode))
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("read key file %s: %w", path, err)
	}
	if len(data) > maxKeyFile {
		return nil, fmt.Errorf("key file %s is too large (over %d bytes)", path, maxKeyFile)
	}
	if len(data) == 0 {
		return nil, errors.New("key file " + path + " is empty")
	}
	return data, nil
}
