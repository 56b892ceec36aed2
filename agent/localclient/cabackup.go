package localclient

import (
	"context"

	"github.com/meshd/meshd/agent/apitype"
)

// CABackup asks the CA holder for a sealed backup; the caller writes it.
func (c *Client) CABackup(ctx context.Context, passphrase string) (*apitype.CABackup, error) {
	var r apitype.CABackup
	return &r, c.postJSON(ctx, apitype.PathCABackup, apitype.CABackupRequest{Passphrase: passphrase}, &r)
}

// CARestore makes this node the CA holder from a sealed backup.
func (c *Client) CARestore(ctx context.Context, sealed []byte, passphrase string) (*apitype.CACustody, error) {
	var r apitype.CACustody
	return &r, c.postJSON(ctx, apitype.PathCARestore, apitype.CARestoreRequest{Sealed: sealed, Passphrase: passphrase}, &r)
}
