package netcheck

import (
	"fmt"
	"strings"
	"time"

	"github.com/meshd/meshd/codes"
)

// Status is how a line of the check reads.
type Status string

const (
	StatusOK   Status = "ok"
	StatusWarn Status = "warn"
	StatusFail Status = "fail"
)

// Line is one line of a check's outcome: a target's answer, or a verdict,
// each with its code.
type Line struct {
	Name   string // "udp NAME", "mapping", "path"
	Status Status
	Code   codes.Code
	Detail string
}

// Lines are the report as lines with codes: one per target (answered or
// not), then the mapping and the path. A blocked or unreachable check is
// a failed line per target (Err says why); an unchecked one is a warning
// per target, NetcheckNotServed for those that serve no STUN.
func (r *Report) Lines() []Line {
	var out []Line
	for _, a := range r.Answers {
		name := "udp " + a.Name
		switch {
		case a.Answered:
			out = append(out, Line{name, StatusOK, codes.NetcheckAnswered,
				fmt.Sprintf("%s answered in %s; it sees this node as %s", a.STUN, a.RTT.Round(100*time.Microsecond), a.Mapped)})
		case r.UDP:
			out = append(out, Line{name, StatusWarn, codes.NetcheckNoAnswer, fmt.Sprintf("%s did not answer over UDP", a.STUN)})
		case a.TCPAnswered && !a.Serves():
			out = append(out, Line{name, StatusWarn, codes.NetcheckNotServed, a.notServed()})
		default:
			tcp := ""
			switch {
			case a.TCPAnswered:
				tcp = fmt.Sprintf("; its TCP control port %s did", a.TCP)
			case a.TCPTried:
				tcp = fmt.Sprintf("; its TCP control port %s did not either", a.TCP)
			}
			st, code := StatusFail, codes.Of(r.Err())
			if r.Unchecked {
				st, code = StatusWarn, codes.NetcheckNoAnswer
			}
			out = append(out, Line{name, st, code, fmt.Sprintf("%s did not answer over UDP%s", a.STUN, tcp)})
		}
	}
	if !r.UDP {
		return out
	}
	if r.Late > 0 {
		out = append(out, Line{"udp", StatusWarn, codes.NetcheckSlow,
			fmt.Sprintf("UDP answered only %s after the check began, while TCP answered at once: a busy control node, not blocked UDP", r.Late.Round(time.Millisecond))})
	}
	switch r.Mapping {
	case MappingPortPreserving:
		if !r.NAT {
			out = append(out, Line{"mapping", StatusOK, codes.NetcheckNoNAT, fmt.Sprintf("no NAT: the control nodes see %s, this node's own address", r.Local)})
		} else {
			out = append(out, Line{"mapping", StatusOK, codes.NetcheckPortPreserving,
				fmt.Sprintf("port-preserving NAT: local port %d is seen as port %d by every control node", r.Local.Port(), r.Answers[r.firstAnswered()].Mapped.Port())})
		}
	case MappingEndpointIndependent:
		out = append(out, Line{"mapping", StatusOK, codes.NetcheckEndpointIndependent,
			fmt.Sprintf("endpoint-independent NAT: local port %d is seen as port %d by every control node", r.Local.Port(), r.Answers[r.firstAnswered()].Mapped.Port())})
	case MappingSymmetric:
		out = append(out, Line{"mapping", StatusWarn, codes.NetcheckSymmetric,
			fmt.Sprintf("symmetric NAT: local port %d is seen as ports %s, a different one per control node", r.Local.Port(), r.mappedPorts())})
	default:
		out = append(out, Line{"mapping", StatusWarn, codes.NetcheckMappingUnknown, "only one control node answered: the mapping could not be compared"})
	}
	if r.Direct {
		out = append(out, Line{"path", StatusOK, codes.NetcheckDirect,
			fmt.Sprintf("direct path possible; what cannot go direct is relayed via %s", r.Relay)})
	} else {
		out = append(out, Line{"path", StatusWarn, codes.NetcheckRelayed,
			fmt.Sprintf("no direct path to nodes behind NATs: relayed via %s", r.Relay)})
	}
	return out
}

// notServed is the line of a target whose control port answered but
// that does not say it serves STUN on the port asked.
func (a Answer) notServed() string {
	if a.ServedSTUN == 0 {
		return fmt.Sprintf("not checked: %s does not serve STUN (older release); its TCP control port %s answered, so its silence over UDP proves nothing", a.Name, a.TCP)
	}
	return fmt.Sprintf("not checked: %s serves STUN on port %d, not on %d as asked (ports.stun differs); its TCP control port %s answered, so its silence over UDP proves nothing", a.Name, a.ServedSTUN, a.STUN.Port(), a.TCP)
}

// Err is the check's failure: codes.OverlayUDPBlocked when no target
// answered over UDP while one that serves STUN on the port asked
// answered on TCP, codes.NetcheckUnreachable when none answered either
// way, nil when UDP works or the check could not tell (Unchecked: the
// targets that answered on TCP serve no STUN, an older release).
func (r *Report) Err() error {
	switch {
	case r.UDP, r.Unchecked:
		return nil
	case r.Blocked:
		return codes.Wrap(codes.OverlayUDPBlocked, fmt.Errorf("no control node (%s) answered over UDP from %s while their TCP control port did: outbound UDP is blocked here",
			r.names(), r.Local))
	default:
		return codes.Wrap(codes.NetcheckUnreachable, fmt.Errorf("no control node (%s) answered over UDP or TCP", r.names()))
	}
}

func (r *Report) firstAnswered() int {
	for i, a := range r.Answers {
		if a.Answered {
			return i
		}
	}
	return 0
}

func (r *Report) mappedPorts() string {
	var ps []string
	for _, a := range r.Answers {
		if a.Answered {
			ps = append(ps, fmt.Sprint(a.Mapped.Port()))
		}
	}
	return strings.Join(ps, ", ")
}

func (r *Report) names() string {
	var ns []string
	for _, a := range r.Answers {
		ns = append(ns, a.Name)
	}
	return strings.Join(ns, ", ")
}
