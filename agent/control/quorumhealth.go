package control

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// healthTimeout bounds `meshctl status`'s question to each voter: the
// voters are asked at once, so a status with a voter down takes this long
// at most.
const healthTimeout = time.Second

// QuorumHealth is this control node's view of the raft quorum: every voter
// in its configuration asked, at once, for its raft stats over the
// internal API (this node answers for itself). A voter is reachable when
// it answers within healthTimeout.
func (p *Plane) QuorumHealth(ctx context.Context) apitype.Quorum {
	ids := p.raft.VoterIDs()
	leader := p.raft.LeaderID()
	q := apitype.Quorum{Voters: make([]apitype.Voter, len(ids)), Needed: len(ids)/2 + 1}
	if leader != "" {
		q.Leader = p.nameOf(leader)
	}
	var wg sync.WaitGroup
	for i, id := range ids {
		v := &q.Voters[i]
		v.Name, v.Self, v.Leader, v.LastContactMS = p.nameOf(id), id == p.cfg.NodeID, id == leader, -1
		if v.Self {
			v.Reachable = true
			if lc := p.raft.Progress().LastContact; lc >= 0 && !v.Leader {
				v.LastContactMS = lc.Milliseconds()
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.askVoter(ctx, id, v)
		}()
	}
	wg.Wait()
	for _, v := range q.Voters {
		if v.Reachable {
			q.Reachable++
		}
	}
	return q
}

// askVoter fills v from voter id's raft stats.
func (p *Plane) askVoter(ctx context.Context, id string, v *apitype.Voter) {
	n, ok := p.raft.FSM().Node(id)
	if !ok || n.EnrollAddr == "" {
		v.Error = "no control address on record"
		return
	}
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	var st RaftStats
	if err := p.client.Call(ctx, n.EnrollAddr, PathRaftStats, true, nil, &st); err != nil {
		v.Error = err.Error()
		return
	}
	v.Reachable = true
	if st.LastContact >= 0 && !v.Leader {
		v.LastContactMS = st.LastContact.Milliseconds()
	}
}

// QuorumWarnings are the warnings `meshctl status` shows for q: no leader
// (codes.NoLeaderWarning), or reachable voters no more than a quorum
// needs, so that one more loss costs it (codes.QuorumAtRisk).
func QuorumWarnings(q apitype.Quorum) []apitype.Warning {
	var out []apitype.Warning
	var down []string
	for _, v := range q.Voters {
		if !v.Reachable {
			down = append(down, v.Name)
		}
	}
	if q.Leader == "" {
		out = append(out, apitype.Warning{Code: codes.NoLeaderWarning,
			Detail: fmt.Sprintf("%d of %d raft voters reachable from here, %d needed for a quorum%s", q.Reachable, len(q.Voters), q.Needed, listDown(down))})
	}
	if q.Leader != "" && q.Reachable <= q.Needed && len(down) > 0 {
		out = append(out, apitype.Warning{Code: codes.QuorumAtRisk,
			Detail: fmt.Sprintf("%d of %d raft voters reachable, %d needed for a quorum%s", q.Reachable, len(q.Voters), q.Needed, listDown(down))})
	}
	return out
}

func listDown(down []string) string {
	if len(down) == 0 {
		return ""
	}
	return "; unreachable: " + strings.Join(down, ", ")
}
