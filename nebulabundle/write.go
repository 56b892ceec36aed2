package nebulabundle

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrKeyExists: WriteDir found a host.key that differs from Bundle.Key
// and left it, and everything else, as it was. Another device's bundle
// is in the directory, or this one was made with another key.
var ErrKeyExists = errors.New("a different host.key is already there; not replacing it")

// WriteDir writes the bundle into dir (see the package doc): ca.crt,
// host.crt and config.yml 0644, host.key 0600 when b.Key is set. It
// makes dir 0700 when missing. It validates, renders and reads any
// existing host.key before it writes anything; each file is replaced
// whole (temp file, fsync, rename, then the directory synced), so a crash
// leaves each file old or new, never torn. Certificates and config are
// replaced (a renewal writes the same directory again); a host.key is
// never replaced by a different one (ErrKeyExists). Errors name files,
// never their content.
func (b Bundle) WriteDir(dir string) error {
	cfg, err := b.ConfigYAML()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("nebula bundle: make %s: %w", dir, err)
	}
	if b.Key != nil {
		old, err := os.ReadFile(filepath.Join(dir, KeyFile))
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return fmt.Errorf("nebula bundle: read the existing %s: %w", filepath.Join(dir, KeyFile), err)
		case !bytes.Equal(old, b.Key):
			return fmt.Errorf("nebula bundle: %s: %w", filepath.Join(dir, KeyFile), ErrKeyExists)
		}
	}
	files := []struct {
		name string
		data []byte
		mode fs.FileMode
	}{
		{CAFile, b.CACerts, 0o644},
		{CertFile, b.Cert, 0o644},
		{KeyFile, b.Key, 0o600},
		{ConfigFile, cfg, 0o644}, // last: a config only ever names files already written
	}
	for _, f := range files {
		if f.data == nil {
			continue
		}
		if err := writeAtomic(dir, f.name, f.data, f.mode); err != nil {
			return err
		}
	}
	return syncDir(dir)
}

// writeAtomic replaces dir/name with data at mode through a temp file in
// dir: created 0600, written, fsynced, chmodded, renamed.
func writeAtomic(dir, name string, data []byte, mode fs.FileMode) (err error) {
	path := filepath.Join(dir, name)
	tmp, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return fmt.Errorf("nebula bundle: write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("nebula bundle: write %s: %w", path, err)
	}
	if err = tmp.Chmod(mode); err != nil { // not subject to the umask
		return fmt.Errorf("nebula bundle: write %s: %w", path, err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("nebula bundle: write %s: %w", path, err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("nebula bundle: write %s: %w", path, err)
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("nebula bundle: write %s: %w", path, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("nebula bundle: sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("nebula bundle: sync %s: %w", dir, err)
	}
	return nil
}
