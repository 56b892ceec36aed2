package agent

import (
	"net/http"

	"github.com/meshd/meshd/agent/apitype"
)

// version is GET /v0/version: this meshd's version, commit and Go
// version, for `meshctl version` to compare with its own.
func (a *Agent) version(*http.Request) (apitype.Build, error) {
	return apitype.NewBuild(a.d.Version, a.d.Commit), nil
}
