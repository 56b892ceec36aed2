package control

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
)

// Pair health in the tunnel view (issue 28 item 4). Every member probes
// the others over the overlay by itself (agent/member/pairhealth.go) and
// reports the ones it cannot reach with its tunnels: a worker in its
// TunnelsRequest, a control node in its own TunnelReport (Hooks.Unreachable).
// The merged view names them per node (TunnelNode.Unreachable) and as
// broken pairs (TunnelMap.Broken); `meshctl nodes` marks each node some
// member cannot reach, and who (apitype.Node.UnreachableFrom), from the
// same view asked within pairAsk while the listing's own read runs.

// pairAsk bounds the tunnel view a node listing asks for: a control node
// that does not answer within it leaves its members' reports out of the
// marks (the listing itself is not held up longer than that).
const pairAsk = time.Second

// ownUnreachable is this node's own report of the members it cannot
// reach (none without the hook).
func (p *Plane) ownUnreachable() []string {
	if p.hooks.Unreachable == nil {
		return nil
	}
	return p.hooks.Unreachable()
}

// checkedUnreachable is what a report from node self may name
// unreachable: active nodes on record other than self, each once, sorted.
// Anything else is dropped, as checkedTunnels drops a tunnel to a node
// that is not one.
func (p *Plane) checkedUnreachable(self string, in []string) []string {
	var out []string
	for _, name := range in {
		n, ok := p.raft.FSM().NodeByName(name)
		if !ok || n.State != state.NodeActive || name == self || slices.Contains(out, name) {
			continue
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// liveNames are the names of in that are active nodes (names), not down
// in gossip and not self: what the view keeps of a report's unreachable
// members.
func liveNames(in []string, self string, names, down map[string]bool) []string {
	var out []string
	for _, name := range in {
		if name != self && names[name] && !down[name] && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// brokenPairs are the pairs of nodes in the view one end of which
// reports the other unreachable, each pair once (A < B), with the ends
// that report it. A node down in gossip is in no pair: mergeTunnels
// dropped its report, and liveNames dropped it from the others'. A node
// whose own report is missing (its control node did not answer) is still
// in the pairs the other end reports.
func brokenPairs(nodes []apitype.TunnelNode) []apitype.TunnelBreak {
	pairs := map[[2]string]*apitype.TunnelBreak{}
	for _, n := range nodes {
		for _, other := range n.Unreachable {
			a, b := min(n.Name, other), max(n.Name, other)
			br := pairs[[2]string{a, b}]
			if br == nil {
				br = &apitype.TunnelBreak{A: a, B: b}
				pairs[[2]string{a, b}] = br
			}
			br.From = append(br.From, n.Name)
		}
	}
	var out []apitype.TunnelBreak
	for _, br := range pairs {
		slices.Sort(br.From)
		out = append(out, *br)
	}
	slices.SortFunc(out, func(x, y apitype.TunnelBreak) int { return cmp.Or(cmp.Compare(x.A, y.A), cmp.Compare(x.B, y.B)) })
	return out
}

// unreachableFrom is, by node name, the members that report they cannot
// reach it.
func unreachableFrom(broken []apitype.TunnelBreak) map[string][]string {
	out := map[string][]string{}
	for _, br := range broken {
		for _, from := range br.From {
			to := br.A
			if from == br.A {
				to = br.B
			}
			out[to] = append(out[to], from)
		}
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}

// readWithPairs runs read (the listing's read index) and asks for the
// tunnel view within pairAsk at the same time, and returns, once both
// are done, which members cannot reach which node (unreachableFrom);
// nothing when read fails.
func (p *Plane) readWithPairs(ctx context.Context, read func(context.Context) error) (map[string][]string, error) {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		broken []apitype.TunnelBreak
		wg     sync.WaitGroup
	)
	wg.Go(func() { broken = p.tunnelMap(pctx, pairAsk, pairAsk).Broken })
	err := read(ctx)
	if err != nil {
		cancel()
	}
	wg.Wait()
	if err != nil {
		return nil, err
	}
	return unreachableFrom(broken), nil
}
