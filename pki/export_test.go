package pki

import "os"

// MaxKeyFile exposes the key file size bound to the external tests.
const MaxKeyFile = maxKeyFile

// SetFileFaults makes WriteFileAtomic's fsync and rename call sync and
// rename instead, until the returned function restores them.
func SetFileFaults(sync func(*os.File) error, rename func(oldpath, newpath string) error) (restore func()) {
	oldSync, oldRename := syncFile, renameFile
	syncFile, renameFile = sync, rename
	return func() { syncFile, renameFile = oldSync, oldRename }
}
