package cert

import "maps"

// meshd patch 5 (PATCHES.md, "Apply a membership change without a
// reload"): a blocklist changed without reading the CA bundle again.

// CopyWithBlocklist returns a pool with the same CAs as ncp (shared: a
// pool's CAs are not changed once it is loaded) and a copy of its
// blocklist, for the caller to change and store in ncp's place; ncp, which
// handshakes may be reading, is left alone.
func (ncp *CAPool) CopyWithBlocklist() *CAPool {
	return &CAPool{CAs: ncp.CAs, certBlocklist: maps.Clone(ncp.certBlocklist)}
}

// UnblocklistFingerprint takes a cert fingerprint out of the blocklist.
func (ncp *CAPool) UnblocklistFingerprint(f string) {
	delete(ncp.certBlocklist, f)
}

// BlocklistLen is the number of blocklisted fingerprints.
func (ncp *CAPool) BlocklistLen() int {
	return len(ncp.certBlocklist)
}
