package agent

import (
	"context"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

func (a *Agent) status(ctx context.Context) apitype.Status {
	a.mu.Lock()
	ph, rt, refused, rf := a.phase, a.rt, a.refused, a.refusedFacts
	a.mu.Unlock()
	s := apitype.Status{State: string(ph), Version: a.d.Version}
	if refused != nil && rf != nil {
		s.Cluster, s.ClusterID, s.Node, s.NodeID, s.Role = rf.ClusterName, rf.ClusterID, rf.Name, rf.NodeID, string(rf.Role)
		s.Error = apitype.NewError(codes.OrInternal(refused), refused)
	}
	if rt == nil {
		return s
	}
	rt.Status(ctx, &s)
	return s
}
