package state

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// RouteRules names the rules a route request (AdvertiseRoutes) or an
// approval (ApproveRoute) is judged by. The entry carries them, so a raft
// log replays to the state it made when it was written.
//
// Issue 52 changed them: under issue 33's rules a mere request
// constrained every later one, so one worker asking for the private
// ranges (unapproved) had every overlapping request refused
// RouteOverlap, and a relay's claimed underlay address refused every
// prefix holding it. A change that only relaxes a refusal still changes
// what an old entry does: a request refused then would be taken when the
// log replays after a restart, on this node and not on one whose
// snapshot is newer than the entry. So the old rules stay, for entries
// that name none.
type RouteRules uint8

const (
	// RulesRequested (the zero value, every entry written before issue
	// 52): every active node's prefixes, approved or not, constrain a
	// request, and a relay counts at its claimed underlay address as
	// well as where the cluster saw it.
	RulesRequested RouteRules = 0
	// RulesApproved (issue 52): only approved prefixes constrain.
	// Requests may overlap each other; the overlap is judged at
	// approval (approving a prefix that overlaps, without being equal
	// to, another active node's approved prefix is refused
	// RouteOverlap, whatever the rules: checkApproval). A request is judged once, when first asked: a
	// prefix the node asks again is not judged again until its approval.
	// A relay counts only at the address the cluster saw its join come
	// from (Node.SeenFrom), never at the one it claims (Node.Underlay).
	//
	// A control node of this release writes its entries with these
	// rules. A leader of the release before drops the field when it
	// re-encodes a forwarded write (authorizeForward), so while the
	// leader is not upgraded every replica judges by RulesRequested. A
	// replica of the release before ignores the field: once the leader
	// is upgraded, it would judge these entries by the old rules.
	RulesApproved RouteRules = 1
)

// checkRequest checks the sorted prefixes n asks to carry.
func (s *Snapshot) checkRequest(n Node, want []netip.Prefix, rules RouteRules) error {
	if err := checkRules(rules); err != nil {
		return err
	}
	if len(want) > MaxRoutesPerNode {
		return codes.Wrap(codes.RouteBad, fmt.Errorf("%d prefixes: at most %d per node", len(want), MaxRoutesPerNode))
	}
	for i, p := range want {
		if err := CheckRoutePrefix(p); err != nil {
			return err
		}
		if s.Cluster != nil && s.Cluster.Overlay.Overlaps(p) && p != ExitPrefix {
			return codes.Wrap(codes.RouteBad, fmt.Errorf("%s overlaps the cluster overlay %s", p, s.Cluster.Overlay))
		}
		if i > 0 && want[i-1] == p {
			return codes.Wrap(codes.RouteBad, fmt.Errorf("%s is asked twice", p))
		}
		if p == ExitPrefix {
			continue
		}
		for _, q := range want[:i] {
			if q != ExitPrefix && q.Overlaps(p) {
				return codes.Wrap(codes.RouteBad, fmt.Errorf("%s and %s overlap", q, p))
			}
		}
		if rules == RulesApproved {
			if slices.ContainsFunc(n.Routes, func(r Route) bool { return r.Prefix == p }) {
				continue // judged when first asked; judged again at approval
			}
			if err := s.checkApprovedOverlap(n, p); err != nil {
				return err
			}
			if err := s.checkUnderlay(p, rules); err != nil {
				return err
			}
			continue
		}
		for _, o := range s.Nodes {
			if o.ID == n.ID || o.State != NodeActive {
				continue
			}
			for _, r := range o.Routes {
				if !r.Exit() && r.Prefix != p && r.Prefix.Overlaps(p) {
					return codes.Wrap(codes.RouteOverlap, fmt.Errorf("%s overlaps %s, which node %s asks to carry", p, r.Prefix, o.Name))
				}
			}
		}
		if err := s.checkUnderlay(p, rules); err != nil {
			return err
		}
	}
	return nil
}

// checkApproval checks, under rules, that n may be approved to carry p:
// the underlay as the rules place it, and, whatever the rules, no
// overlap with another active node's approved prefix. That last check
// changes no entry written before issue 52: under RulesRequested no two
// active nodes ever asked for overlapping prefixes (a node's record
// leaves the active state only for good, and the record reused by its
// next admission asks for nothing), so it never fired then; now it keeps
// approved prefixes apart whatever an entry says, the invariant carriers
// and every member's unsafe routes are built on.
func (s *Snapshot) checkApproval(n Node, p netip.Prefix, rules RouteRules) error {
	if err := checkRules(rules); err != nil {
		return err
	}
	if err := s.checkApprovedOverlap(n, p); err != nil {
		return err
	}
	return s.checkUnderlay(p, rules)
}

// checkRules refuses rules this build does not know (an entry of a later
// release): judging it by other rules would be a guess.
func checkRules(r RouteRules) error {
	if r > RulesApproved {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("route rules %d: this meshd knows rules 0 and 1 only; upgrade it", r))
	}
	return nil
}

// checkApprovedOverlap refuses p when it overlaps, without being equal
// to, a prefix another active node is approved to carry (two routers of
// one prefix are failover; the exit prefix overlaps everything and is
// exempt). The message names that node and how to free the range.
func (s *Snapshot) checkApprovedOverlap(n Node, p netip.Prefix) error {
	if p == ExitPrefix {
		return nil
	}
	var by *Node // of the nodes in the way, the first by name: every replica names the same
	var in netip.Prefix
	for id, o := range s.Nodes {
		if id == n.ID || o.State != NodeActive || (by != nil && o.Name > by.Name) {
			continue
		}
		for _, r := range o.Routes {
			if r.Approved && !r.Exit() && r.Prefix != p && r.Prefix.Overlaps(p) {
				by, in = &o, r.Prefix
				break
			}
		}
	}
	if by == nil {
		return nil
	}
	return codes.Wrap(codes.RouteOverlap, fmt.Errorf(
		"%s overlaps %s, which node %s is approved to carry: approve exactly %s instead, or withdraw it first (`meshctl routes withdraw %s %s`)",
		p, in, by.Name, in, by.Name, in))
}

// CheckRoutePrefix checks one prefix as the cluster takes it: a valid
// IPv4 prefix with no host bits set, not a single address of loopback,
// link-local or multicast space. The exit prefix passes.
func CheckRoutePrefix(p netip.Prefix) error {
	switch {
	case !p.IsValid():
		return codes.Wrap(codes.RouteBad, errors.New("not a prefix"))
	case !p.Addr().Is4():
		return codes.Wrap(codes.RouteBad, fmt.Errorf("%s: only IPv4 prefixes are routed", p))
	case p != p.Masked():
		return codes.Wrap(codes.RouteBad, fmt.Errorf("%s has host bits set; did you mean %s?", p, p.Masked()))
	case p == ExitPrefix:
		return nil
	case p.Addr().IsLoopback() || p.Addr().IsLinkLocalUnicast() || p.Addr().IsMulticast() || p.Overlaps(netip.MustParsePrefix("224.0.0.0/3")):
		return codes.Wrap(codes.RouteBad, fmt.Errorf("%s is loopback, link-local or multicast space", p))
	}
	return nil
}

// checkUnderlay refuses a prefix holding the underlay address of a
// control node (a lighthouse and seed) or of a relay: every peer would
// route its tunnel to that node into the tunnel. The exit prefix is
// exempt: a member using an exit node keeps those paths off it
// (hostroute.Exit.Exclude).
func (s *Snapshot) checkUnderlay(p netip.Prefix, rules RouteRules) error {
	if p == ExitPrefix {
		return nil
	}
	for _, n := range s.Nodes {
		if n.State != NodeActive || (n.Role != pki.RoleControl && !n.Relay) {
			continue
		}
		for _, a := range underlaysOf(n, rules) {
			ip, err := netip.ParseAddr(a)
			if err == nil && p.Contains(ip.Unmap()) {
				return codes.Wrap(codes.RouteUnderlay, fmt.Errorf("%s holds %s, the underlay address of %s (a %s): its tunnel would route into itself", p, ip, n.Name, roleWord(n)))
			}
		}
	}
	return nil
}

// underlaysOf is where the underlay check places n. A control node is
// admitted by an operator's token for its role and every member dials
// the underlay address it advertised: both count. A relay is any member
// that says `relay: true`, so under RulesApproved only what the cluster
// saw counts: its claimed address would let it refuse any prefix at all.
func underlaysOf(n Node, rules RouteRules) []string {
	if rules == RulesApproved && n.Role != pki.RoleControl {
		return []string{n.SeenFrom}
	}
	return []string{n.Underlay, n.SeenFrom}
}

func roleWord(n Node) string {
	if n.Role == pki.RoleControl {
		return "control node"
	}
	return "relay"
}
