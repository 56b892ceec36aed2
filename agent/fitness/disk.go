package fitness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/meshd/meshd/codes"
)

// probeName is the file the disk check writes in the state dir and
// removes again.
const probeName = ".fitness-probe"

// probeSize is what the check writes: one page, so a filesystem that is
// full to the page (tmpfs, ext4 reserved blocks) fails it.
const probeSize = 4096

// Disk is the write check of one directory. The zero value is not
// usable: NewDisk.
type Disk struct {
	dir string

	mu       sync.Mutex
	err      error // the last check's failure; nil after a pass
	failures uint64
}

// NewDisk checks dir (meshd's state dir: raft, serf and the identity live
// under it).
func NewDisk(dir string) *Disk { return &Disk{dir: dir} }

// Check writes a page to a probe file in the directory, syncs it and
// removes it, and keeps the outcome: codes.DiskFull when the filesystem is
// full (ENOSPC, EDQUOT), codes.DiskCheckFailed for any other failure.
func (d *Disk) Check() error {
	err := d.probe()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.err = err
	if err != nil {
		d.failures++
	}
	return err
}

func (d *Disk) probe() error {
	path := filepath.Join(d.dir, probeName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return classify(path, err)
	}
	_, werr := f.Write(make([]byte, probeSize))
	if werr == nil {
		werr = f.Sync()
	}
	cerr := f.Close()
	rerr := os.Remove(path)
	if err := errors.Join(werr, cerr); err != nil {
		return classify(path, err)
	}
	if rerr != nil {
		return classify(path, rerr)
	}
	return nil
}

// classify codes a failed write: a full filesystem is codes.DiskFull,
// anything else codes.DiskCheckFailed.
func classify(path string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return codes.Wrap(codes.DiskFull, fmt.Errorf("write check of %s: %w", path, err))
	}
	return codes.Wrap(codes.DiskCheckFailed, fmt.Errorf("write check of %s: %w", path, err))
}

// Err is the last check's failure, nil if it passed or none ran.
func (d *Disk) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// Failures counts the failed checks since start.
func (d *Disk) Failures() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.failures
}
