package gossip

import (
	"net/netip"
	"sort"
	"sync/atomic"
	"time"

	"github.com/hashicorp/serf/serf"
)

// eventBuffer is the capacity of the Events channel.
const eventBuffer = 256

// Status is a member's gossip state, as meshctl nodes shows it.
type Status string

// Member states.
const (
	StatusAlive   Status = "alive"
	StatusSuspect Status = "suspect" // serf-alive, but memberlist suspects it
	StatusFailed  Status = "failed"
	StatusLeft    Status = "left"
	StatusLeaving Status = "leaving"
)

// Member is one node as gossip sees it.
type Member struct {
	Name   string
	Addr   netip.AddrPort // the address it advertises
	Tags   map[string]string
	Status Status
}

// EventKind says what happened to the members of an Event.
type EventKind string

// Event kinds, one per serf member event type.
const (
	EventJoin   EventKind = "join"   // new, or back after a failure or leave
	EventLeave  EventKind = "leave"  // left gracefully
	EventFailed EventKind = "failed" // stopped answering (a Shutdown looks like this)
	EventUpdate EventKind = "update" // tags changed
	EventReap   EventKind = "reap"   // a failed or left member was forgotten
	EventUser   EventKind = "user"   // a Notify from some member; Name says which
)

// Event is a change to one or more members.
type Event struct {
	Kind    EventKind
	Members []Member
	Name    string    // EventUser: the notification's name
	At      time.Time // when this node received the event from serf
}

// memberFromSerf converts a serf member; suspect reports whether memberlist
// currently suspects it.
func memberFromSerf(m serf.Member, suspect bool) Member {
	addr, _ := netip.AddrFromSlice(m.Addr)
	out := Member{
		Name: m.Name,
		Addr: netip.AddrPortFrom(addr.Unmap(), m.Port),
		Tags: cloneTags(m.Tags),
	}
	out.Status = statusOf(m.Status, suspect)
	return out
}

// statusOf is serf's status as this package's, an alive member suspected
// by this node's own probes as StatusSuspect.
func statusOf(st serf.MemberStatus, suspect bool) Status {
	switch st {
	case serf.StatusAlive:
		if suspect {
			return StatusSuspect
		}
		return StatusAlive
	case serf.StatusLeaving:
		return StatusLeaving
	case serf.StatusLeft:
		return StatusLeft
	case serf.StatusFailed:
		return StatusFailed
	default:
		return Status(st.String())
	}
}

// eventFromSerf translates a serf event. ok is false for queries, which
// meshd does not use.
func eventFromSerf(e serf.Event, at time.Time) (Event, bool) {
	if ue, ok := e.(serf.UserEvent); ok {
		return Event{Kind: EventUser, Name: ue.Name, At: at}, true
	}
	me, ok := e.(serf.MemberEvent)
	if !ok {
		return Event{}, false
	}
	var kind EventKind
	switch me.Type {
	case serf.EventMemberJoin:
		kind = EventJoin
	case serf.EventMemberLeave:
		kind = EventLeave
	case serf.EventMemberFailed:
		kind = EventFailed
	case serf.EventMemberUpdate:
		kind = EventUpdate
	case serf.EventMemberReap:
		kind = EventReap
	default:
		return Event{}, false
	}
	ev := Event{Kind: kind, At: at, Members: make([]Member, 0, len(me.Members))}
	for _, m := range me.Members {
		ev.Members = append(ev.Members, memberFromSerf(m, false))
	}
	return ev, true
}

// membersFromSerf converts serf's member list, marking the alive members
// this node suspects (suspect.go), and sorts it by name.
func membersFromSerf(ms []serf.Member, suspect map[string]bool) []Member {
	out := make([]Member, 0, len(ms))
	for _, m := range ms {
		out = append(out, memberFromSerf(m, suspect[m.Name]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// eventQueue is the Events channel with drop-oldest semantics. One
// goroutine (the pump) sends; any number may receive.
type eventQueue struct {
	ch      chan Event
	dropped atomic.Uint64
}

func newEventQueue(size int) *eventQueue {
	return &eventQueue{ch: make(chan Event, size)}
}

// push enqueues ev without ever blocking: while the buffer is full it
// discards the oldest queued event and counts it. It must only be called
// from the single sending goroutine.
func (q *eventQueue) push(ev Event) {
	for {
		select {
		case q.ch <- ev:
			return
		default:
		}
		select {
		case <-q.ch:
			q.dropped.Add(1)
		default: // a receiver made room meanwhile; try again
		}
	}
}
