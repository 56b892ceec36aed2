package agent

import (
	"net/netip"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/enroll"
)

// joinEnrollDeps are the enroll client's collaborators for a join:
// enrollDeps, with the approval code of a token minted with --approve
// shown as a join line of its own.
func (j joiner) joinEnrollDeps(underlay netip.Addr, step func(string, ...any), emit func(apitype.JoinLine)) enroll.ClientDeps {
	d := j.a.preflight().EnrollDeps(underlay, func(msg string) { step("%s", msg) }, func(w apitype.Warning) { emit(apitype.JoinLine{Warning: &w}) })
	d.Approval = func(s enroll.ApprovalShown) {
		emit(apitype.JoinLine{Approval: &apitype.JoinApproval{Name: s.Name, Code: s.Code, Seed: s.Seed, Expires: s.Expires}})
	}
	return d
}
