package raftnode

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/hashicorp/raft"

	"github.com/meshd/meshd/codes"
)

// Role is a server's place in raft as meshd shows it.
type Role string

const (
	Leader   Role = "leader"
	Voter    Role = "voter"
	Nonvoter Role = "nonvoter"
	None     Role = "none" // not in the raft configuration (workers, removed nodes)
)

// IsLeader reports whether this node leads right now.
func (n *Node) IsLeader() bool { return n.r.State() == raft.Leader }

// IsShutdown reports whether raft has shut down (it stops on a fatal error).
func (n *Node) IsShutdown() bool { return n.r.State() == raft.Shutdown }

// LeaderID is the node id of the leader this node knows, or "".
func (n *Node) LeaderID() string {
	_, id := n.r.LeaderWithID()
	return string(id)
}

// Roles returns each server's raft role by node id: Leader, Voter or
// Nonvoter. Nodes not in the configuration are absent.
func (n *Node) Roles() map[string]Role {
	out := map[string]Role{}
	f := n.r.GetConfiguration()
	if f.Error() != nil {
		return out
	}
	_, leader := n.r.LeaderWithID()
	for _, s := range f.Configuration().Servers {
		switch {
		case s.ID == leader:
			out[string(s.ID)] = Leader
		case s.Suffrage == raft.Voter:
			out[string(s.ID)] = Voter
		default:
			out[string(s.ID)] = Nonvoter
		}
	}
	return out
}

// IsVoter reports whether the configuration lists id as a voter.
func (n *Node) IsVoter(id string) bool {
	s, ok := n.suffrage(raft.ServerID(id))
	return ok && s == raft.Voter
}

// IsMember reports whether the configuration lists id at all.
func (n *Node) IsMember(id string) bool {
	_, ok := n.suffrage(raft.ServerID(id))
	return ok
}

// Voters counts the voters in the configuration.
func (n *Node) Voters() int {
	voters := 0
	if f := n.r.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if s.Suffrage == raft.Voter {
				voters++
			}
		}
	}
	return voters
}

// VoterIDs lists the node ids of the configuration's voters.
func (n *Node) VoterIDs() []string {
	var out []string
	if f := n.r.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if s.Suffrage == raft.Voter {
				out = append(out, string(s.ID))
			}
		}
	}
	return out
}

func (n *Node) suffrage(id raft.ServerID) (raft.ServerSuffrage, bool) {
	f := n.r.GetConfiguration()
	if f.Error() != nil {
		return 0, false
	}
	for _, s := range f.Configuration().Servers {
		if s.ID == id {
			return s.Suffrage, true
		}
	}
	return 0, false
}

// AddNonvoter adds id at addr as a non-voter (it replicates but does not
// vote). Leader only.
func (n *Node) AddNonvoter(id, addr string) error {
	return membershipErr(n.r.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, 5*time.Second).Error())
}

// AddVoter makes id a voter. Call it only for a node that has caught up:
// on a one-voter cluster AddVoter on a node that never replicates
// "succeeds" and then the leader steps down. Leader only.
func (n *Node) AddVoter(id, addr string) error {
	return membershipErr(n.r.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, 5*time.Second).Error())
}

// membershipErr codes a membership change refused because this node does
// not lead (any more) as codes.NoLeader, so the caller can ask the next
// leader; other errors pass as they are.
func membershipErr(err error) error {
	if notLeading(err) {
		return codes.Wrap(codes.NoLeader, err)
	}
	return err
}

// notLeading: raft refused a write or a membership change because this
// node does not lead, lost leadership, or is handing it off (a stopping
// control node's first step, issue 54 item 4: a write it refuses so is
// asked again of the next leader, never failed).
func notLeading(err error) bool {
	return errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) ||
		errors.Is(err, raft.ErrLeadershipTransferInProgress)
}

// RemoveServer takes id out of the configuration. Removing the last voter
// is refused with codes.QuorumLoss; an id that is not a member is a no-op;
// a leader that loses its leadership mid-way answers codes.NoLeader (the
// removal is repeatable: ask the next leader). Leader only.
func (n *Node) RemoveServer(id string, timeout time.Duration) error {
	s, member := n.suffrage(raft.ServerID(id))
	if !member {
		return nil
	}
	if s == raft.Voter && n.Voters() <= 1 {
		return codes.Wrap(codes.QuorumLoss, errors.New("it is the last raft voter"))
	}
	if err := n.r.RemoveServer(raft.ServerID(id), 0, timeout).Error(); err != nil {
		if err := membershipErr(err); codes.Of(err) == codes.NoLeader {
			return codes.Wrap(codes.NoLeader, fmt.Errorf("remove %s from raft: %w", id, err))
		}
		return codes.Wrap(codes.RaftApply, fmt.Errorf("remove %s from raft: %w", id, err))
	}
	return nil
}

// HandOff transfers leadership before a planned stop when another voter
// can take it (about 5 ms), instead of leaving the cluster to notice a dead
// leader (1-2 s). A restart is not a departure: membership stays as it is.
func (n *Node) HandOff() error {
	if !n.IsLeader() || n.Voters() < 2 {
		return nil
	}
	return n.r.LeadershipTransfer().Error()
}

// ErrHandOffSlow: a leadership transfer was still under way when the
// caller's bound ran out.
var ErrHandOffSlow = errors.New("leadership transfer still under way")

// HandOffWithin is HandOff waiting at most bound (a stopping control
// node's first step: its stop must not wait on a transfer raft itself
// bounds only by the election timeout, which a config may set long). A
// transfer still under way after bound goes on in raft, which ends it
// at that timeout or at Close (raft resolves every future at Shutdown),
// and so ends the goroutine waiting on it.
func (n *Node) HandOffWithin(bound time.Duration) error {
	if !n.IsLeader() || n.Voters() < 2 {
		return nil
	}
	f := n.r.LeadershipTransfer()
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return fmt.Errorf("%w after %s", ErrHandOffSlow, bound)
	}
}

// Progress is how far this node's raft has come, for a leader deciding
// whether to promote it.
type Progress struct {
	LastLogIndex uint64
	AppliedIndex uint64
	// LastContact is the time since the last contact with a leader; -1
	// when there never was one.
	LastContact time.Duration
}

// Progress reads this node's log and contact state.
func (n *Node) Progress() Progress {
	p := Progress{LastLogIndex: n.r.LastIndex(), AppliedIndex: n.r.AppliedIndex(), LastContact: -1}
	if lc := n.r.LastContact(); !lc.IsZero() {
		p.LastContact = time.Since(lc)
	}
	return p
}

// CommitIndex is the highest log index this node knows committed.
func (n *Node) CommitIndex() uint64 { return n.r.CommitIndex() }

// RoleOf is id's role in the configuration, None when it is not a member.
func (n *Node) RoleOf(id string) Role {
	if r, ok := n.Roles()[id]; ok {
		return r
	}
	return None
}

// Term is this node's current raft term: it changes with every election,
// so an unchanged term means no leader was lost.
func (n *Node) Term() uint64 {
	t, _ := strconv.ParseUint(n.r.Stats()["term"], 10, 64)
	return t
}
