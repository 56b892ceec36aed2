package apitype

import "time"

// The sealed backup paths of the local API (issue 13), control nodes only.
const (
	// PathCABackup is POST /v0/ca/backup: a sealed copy of the CA (on
	// the holder). The answer carries the sealed bytes; meshctl writes
	// the file.
	PathCABackup = "/v0/ca/backup"
	// PathCARestore is POST /v0/ca/restore: make this node the holder
	// from a sealed backup meshctl read.
	PathCARestore = "/v0/ca/restore"
)

// CABackupRequest carries the passphrase meshctl read from the
// operator's passphrase file. It travels only over the local socket.
type CABackupRequest struct {
	Passphrase string `json:"passphrase"`
}

// CABackup is a sealed backup: the whole file meshctl writes (0600).
type CABackup struct {
	Sealed    []byte    `json:"sealed"`
	At        time.Time `json:"at"`
	Cluster   string    `json:"cluster"`
	ClusterID string    `json:"cluster_id"`
}

// CARestoreRequest carries the sealed file and its passphrase, both read
// by meshctl.
type CARestoreRequest struct {
	Sealed     []byte `json:"sealed"`
	Passphrase string `json:"passphrase"`
}
