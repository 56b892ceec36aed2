package agent

import (
	"net/http"

	"github.com/meshd/meshd/agent/apitype"
)

// handleVersion is GET /v0/version: this meshd's version, commit and Go
// version, for `meshctl version` to compare with its own.
func (a *Agent) handleVersion(w http.ResponseWriter, _ *http.Request) {
	apitype.WriteJSON(w, http.StatusOK, apitype.NewBuild(a.d.Version, a.d.Commit))
}
