package agent

import (
	"net/http"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// handleCABackup seals the CA with the passphrase in the request. The
// passphrase is never logged; the sealed bytes go back to meshctl, which
// writes the file with the operator's rights (meshd, confined by its
// unit, cannot write where the operator chooses).
func (a *Agent) handleCABackup(w http.ResponseWriter, r *http.Request) {
	var req apitype.CABackupRequest
	if err := apitype.DecodeBody(r, &req); err != nil {
		apitype.WriteError(w, err)
		return
	}
	pass := []byte(req.Passphrase)
	defer clear(pass)
	ctl, err := a.controlPlane()
	if err != nil {
		apitype.WriteError(w, err)
		return
	}
	sealed, at, err := ctl.Backup(r.Context(), pass, a.operator(r.Context()))
	if err != nil {
		a.log.Warn("CA backup failed", "code", codes.OrInternal(err), "err", err)
		apitype.WriteError(w, err)
		return
	}
	c, _ := ctl.Raft().FSM().Cluster()
	apitype.WriteJSON(w, http.StatusOK, apitype.CABackup{Sealed: sealed, At: at, Cluster: c.Name, ClusterID: c.ID})
}

func (a *Agent) handleCARestore(w http.ResponseWriter, r *http.Request) {
	var req apitype.CARestoreRequest
	if err := apitype.DecodeBody(r, &req); err != nil {
		apitype.WriteError(w, err)
		return
	}
	pass := []byte(req.Passphrase)
	defer clear(pass)
	ctl, err := a.controlPlane()
	if err != nil {
		apitype.WriteError(w, err)
		return
	}
	h, err := ctl.Restore(r.Context(), req.Sealed, pass, a.operator(r.Context()))
	if err != nil {
		a.log.Warn("CA restore refused", "code", codes.OrInternal(err), "err", err)
		apitype.WriteError(w, err)
		return
	}
	apitype.WriteJSON(w, http.StatusOK, apitype.CACustody{From: h.From, To: h.To, Released: h.Released, Took: h.Took})
}
