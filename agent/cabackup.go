package agent

import (
	"net/http"

	"github.com/meshd/meshd/agent/apitype"
)

// caBackup is POST /v0/ca/backup: it seals the CA with the passphrase in
// the request. The passphrase is never logged; the sealed bytes go back
// to meshctl, which writes the file with the operator's rights (meshd,
// confined by its unit, cannot write where the operator chooses).
func (a *Agent) caBackup(r *http.Request, req apitype.CABackupRequest) (apitype.CABackup, error) {
	pass := []byte(req.Passphrase)
	defer clear(pass)
	ctl, err := a.controlPlane()
	if err != nil {
		return apitype.CABackup{}, err
	}
	sealed, at, err := ctl.Backup(r.Context(), pass, a.operator(r.Context()))
	if err != nil {
		return apitype.CABackup{}, err
	}
	c, _ := ctl.Raft().FSM().Cluster()
	return apitype.CABackup{Sealed: sealed, At: at, Cluster: c.Name, ClusterID: c.ID}, nil
}

// caRestore is POST /v0/ca/restore: the sealed CA opened with the
// passphrase becomes this node's, when the holder on record is lost.
func (a *Agent) caRestore(r *http.Request, req apitype.CARestoreRequest) (apitype.CACustody, error) {
	pass := []byte(req.Passphrase)
	defer clear(pass)
	ctl, err := a.controlPlane()
	if err != nil {
		return apitype.CACustody{}, err
	}
	h, err := ctl.Restore(r.Context(), req.Sealed, pass, a.operator(r.Context()))
	if err != nil {
		return apitype.CACustody{}, err
	}
	return apitype.CACustody{From: h.From, To: h.To, Released: h.Released, Took: h.Took}, nil
}
