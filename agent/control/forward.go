package control

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// Forwarded writes are authorised, not relayed: the leader decodes the
// command a follower forwarded, checks it against the caller's identity
// (the TLS peer, a member control node), and records the caller as the
// audit actor, whatever the body says.

// forwardRule decides whether caller may forward cmd; nil allows it.
type forwardRule func(p *Plane, caller Caller, cmd state.Command) error

// forwardable is the one list of commands a control node may forward to
// the leader, and under which condition. A command type not listed is
// refused (codes.ForwardRefused): a new command is not forwardable until
// it has a row here.
var forwardable = map[reflect.Type]forwardRule{
	reflect.TypeFor[state.MintToken]():            anyControl,
	reflect.TypeFor[state.Admit]():                anyControl,
	reflect.TypeFor[state.RevokeToken]():          anyControl,
	reflect.TypeFor[state.PruneTokens]():          anyControl,
	reflect.TypeFor[state.SetNodeState]():         setNodeStateRule,
	reflect.TypeFor[state.RenewNebula]():          caHolderOnly,
	reflect.TypeFor[state.RenewTLS]():             caHolderOnly,
	reflect.TypeFor[state.RotateCA]():             caHolderOnly, // issue 13: the CA holder drives a CA rotation
	reflect.TypeFor[state.RecordCerts]():          anyControl,
	reflect.TypeFor[state.AbortAdmission]():       anyControl,
	reflect.TypeFor[state.SetGossipKeys]():        anyControl,
	reflect.TypeFor[state.RecordRevocationAcks](): anyControl,
	reflect.TypeFor[state.ConfirmJoin]():          confirmRule,
	reflect.TypeFor[state.FailJoin]():             failJoinRule,
	reflect.TypeFor[state.RequestApproval]():      anyControl,
	reflect.TypeFor[state.ApproveJoin]():          anyControl,
	reflect.TypeFor[state.SetCAHolder]():          setCAHolderRule,
	reflect.TypeFor[state.RecordCABackup]():       caBackupRule,
	reflect.TypeFor[state.SetRelay]():             setRelayRule,
	reflect.TypeFor[state.ForgetNode]():           anyControl, // issue 31: the FSM forgets only a removed ephemeral node
	reflect.TypeFor[state.AdvertiseRoutes]():      advertiseRoutesRule,
	reflect.TypeFor[state.ApproveRoute]():         anyControl, // issue 33: an operator's, on any control node
	reflect.TypeFor[state.WithdrawRoute]():        anyControl,
	reflect.TypeFor[state.SetCarrier]():           anyControl,    // the leader's failover, or an operator's move
	reflect.TypeFor[state.AbortJoin]():            abortJoinRule, // issue 52: a joiner undoes its own join through a follower
	reflect.TypeFor[state.SetFacts]():             factsRule,     // issue 54: members' reports, each CA report checked again
	// Bootstrap and Tracked are never forwarded.
}

func anyControl(*Plane, Caller, state.Command) error { return nil }

// setNodeStateRule: a control node may remove another node (the FSM
// refuses the CA holder), record itself as left, and record a worker as
// left (it relays the worker's own POST /v1/self/left, whose guard
// checked the worker is the caller; removing the worker is allowed to it
// anyway); nothing else.
func setNodeStateRule(p *Plane, c Caller, cmd state.Command) error {
	s := cmd.(state.SetNodeState)
	switch {
	case s.State == state.NodeRemoved && s.NodeID != c.NodeID:
		return nil
	case s.State == state.NodeLeft && s.NodeID == c.NodeID && !p.raft.IsMember(c.NodeID):
		// A voter on record as left would be cut from raft by the gate and
		// take the quorum with it: it leaves raft first (`meshctl leave`).
		return nil
	case s.State == state.NodeLeft:
		if n, ok := p.raft.FSM().Node(s.NodeID); ok && n.Role == pki.RoleWorker {
			return nil
		}
	}
	return fmt.Errorf("%s may not set node %s to %s", c.NodeID, s.NodeID, s.State)
}

// setCAHolderRule: a handoff is sent by the node it moves custody from
// (From), a restore by the node it makes the holder (To), which checked
// that the holder on record is lost before it wrote. Whether From holds
// the CA is the FSM's compare-and-set, not this rule's: a forward retried
// after its first attempt committed (the leader changed before it
// answered) must reach the FSM, which answers the remembered result,
// while the record here already names the new holder.
func setCAHolderRule(_ *Plane, c Caller, cmd state.Command) error {
	s := cmd.(state.SetCAHolder)
	switch {
	case !s.Restore && s.From == c.NodeID:
		return nil
	case s.Restore && s.To == c.NodeID:
		return nil
	}
	return fmt.Errorf("%s may not move CA custody from %s to %s", c.NodeID, s.From, s.To)
}

// caBackupRule: a node records only its own backup (the FSM refuses one
// from a node that does not hold the CA on record).
func caBackupRule(_ *Plane, c Caller, cmd state.Command) error {
	if cmd.(state.RecordCABackup).NodeID != c.NodeID {
		return fmt.Errorf("%s may not record another node's CA backup", c.NodeID)
	}
	return nil
}

// caHolderOnly: only the node the cluster record names as CA holder.
func caHolderOnly(p *Plane, c Caller, _ state.Command) error {
	cl, ok := p.raft.FSM().Cluster()
	if !ok || cl.CAHolder != c.NodeID {
		return fmt.Errorf("%s does not hold the CA", c.NodeID)
	}
	return nil
}

// actorOf is the actor cmd carries (its Actor field), which a follower
// claims when it forwards cmd; the leader judges the claim
// (forwardedActor).
func actorOf(cmd state.Command) string {
	v := reflect.Indirect(reflect.ValueOf(cmd))
	if v.Kind() != reflect.Struct {
		return ""
	}
	if f := v.FieldByName("Actor"); f.Kind() == reflect.String {
		return f.String()
	}
	return ""
}

// authorizeForward decodes the command inside t, checks caller may
// forward it, and returns it re-tracked under the same request id with
// its Actor set to what the leader makes of the caller's claim
// (forwardedActor). Refusals are codes.ForwardRefused.
func (p *Plane) authorizeForward(c Caller, t state.Tracked, claim string) (state.Tracked, error) {
	cmd, err := state.Decode(t.Inner)
	if err != nil {
		return state.Tracked{}, codes.Wrap(codes.BadRequest, fmt.Errorf("forwarded command: %w", err))
	}
	rule, ok := forwardable[reflect.TypeOf(cmd)]
	if !ok {
		return state.Tracked{}, codes.Wrap(codes.ForwardRefused, fmt.Errorf("%s may not forward a %T", c.NodeID, cmd))
	}
	if err := rule(p, c, cmd); err != nil {
		return state.Tracked{}, codes.Wrap(codes.ForwardRefused, err)
	}
	actor, accepted := p.forwardedActor(c, cmd, claim)
	if !accepted {
		// Not refused: the write itself is allowed to c, and node:c is
		// true. The claim is not logged: it is the caller's text.
		p.log.Warn("a forwarded write claimed an actor the leader does not accept; recording the forwarding node",
			"caller", c.Name, "recorded", actor)
	}
	v := reflect.New(reflect.TypeOf(cmd)).Elem()
	v.Set(reflect.ValueOf(cmd))
	f := v.FieldByName("Actor")
	if f.Kind() != reflect.String || !f.CanSet() {
		return state.Tracked{}, codes.Wrap(codes.ForwardRefused, fmt.Errorf("a %T carries no audit actor", cmd))
	}
	f.SetString(actor)
	out, err := state.Track(t.ReqID, v.Interface().(state.Command))
	if err != nil {
		return state.Tracked{}, codes.Wrap(codes.BadRequest, errors.New("forwarded command without a request id"))
	}
	return out, nil
}
