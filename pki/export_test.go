package pki

import (
	"net/netip"
	"os"
)

// MaxKeyFile exposes the key file size bound to the external tests.
const MaxKeyFile = maxKeyFile

// SetFileFaults makes WriteFileAtomic's fsync and rename call sync and
// rename instead, until the returned function restores them.
func SetFileFaults(sync func(*os.File) error, rename func(oldpath, newpath string) error) (restore func()) {
	oldSync, oldRename := syncFile, renameFile
	syncFile, renameFile = sync, rename
	return func() { syncFile, renameFile = oldSync, oldRename }
}

// CertRoutes is certRoutes: the unsafe networks a certificate holds for
// routes.
var CertRoutes = certRoutes

// NebulaNetworks are the Nebula CA's overlay networks.
func (ca *CA) NebulaNetworks() []netip.Prefix { return ca.nebula.Networks() }
