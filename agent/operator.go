package agent

import (
	"context"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/localapi"
)

// operatorOn is the audit actor of the local API caller in ctx on the
// node named node: "uid=U@node" (control.OperatorActor). Only the uid is
// kept: the pid identifies nothing once the process is gone, and the
// node's name says which machine's uid it is. Without known credentials
// (a caller that is not the local API: localapi.MayWrite refuses those there) it
// is the node itself, never a uid it cannot vouch for.
func operatorOn(ctx context.Context, node string) string {
	a := localapi.ActorFrom(ctx)
	if !a.Known {
		return control.NodeActor(node).String()
	}
	return control.OperatorActor(a.UID, node).String()
}

// operator is operatorOn for this running node.
func (a *Agent) operator(ctx context.Context) string {
	a.mu.Lock()
	rt := a.rt
	a.mu.Unlock()
	if rt == nil {
		return operatorOn(ctx, a.cfg.NodeName)
	}
	return operatorOn(ctx, rt.Facts().Name)
}
