package hostroute

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/meshd/meshd/codes"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// mainRulePriority is the priority of the kernel's `lookup main` rule:
// meshd's rules must come before it, or main's default route wins.
const mainRulePriority = 32766

// Exit is this node's default route through an exit node. IPv4 only.
// Table and Priority name what meshd owns: keep them the same from one
// UseExit to the next and to ExitOff (meshd's constants), since a rule
// is recognised as meshd's by its priority and table.
type Exit struct {
	TunDev   string         // the Nebula TUN device, e.g. "meshd0"
	Mark     uint32         // the fwmark Nebula's UDP socket carries (Nebula's listen.so_mark); packets with it use the main table
	Table    int            // the routing table meshd owns for this (e.g. 52742): UseExit and ExitOff hold all its IPv4 routes
	Priority int            // the first of the rule priorities meshd uses (e.g. 5274); it uses Priority and Priority+1, both below main's 32766
	Exclude  []netip.Prefix // underlay addresses that must stay off the tunnel (lighthouses, relays, seeds): /32s
}

// validate refuses an Exit no kernel could carry: no TUN device, a zero
// mark (every packet would skip the exit, or none), a reserved table, or
// priorities that would come after the main table's rule.
func (e Exit) validate() error {
	if e.TunDev == "" {
		return codes.Errorf(codes.HostRouteInvalid, "exit: no TUN device named")
	}
	if e.Mark == 0 {
		return codes.Errorf(codes.HostRouteInvalid, "exit: fwmark 0: Nebula's socket must carry a mark (listen.so_mark) for its packets to bypass table %d", e.Table)
	}
	if err := e.validateOwned(); err != nil {
		return err
	}
	for _, p := range e.Exclude {
		if !p.IsValid() || !p.Addr().Is4() {
			return codes.Errorf(codes.HostRouteInvalid, "exit: excluded prefix %s is not an IPv4 prefix (hostroute is IPv4 only)", p)
		}
	}
	return nil
}

// validateOwned checks what ExitOff needs: the table and the priorities.
func (e Exit) validateOwned() error {
	switch e.Table {
	case unix.RT_TABLE_UNSPEC, unix.RT_TABLE_COMPAT, unix.RT_TABLE_DEFAULT, unix.RT_TABLE_MAIN, unix.RT_TABLE_LOCAL:
		return codes.Errorf(codes.HostRouteInvalid, "exit: routing table %d is the kernel's, not one meshd may own", e.Table)
	}
	if e.Table < 0 {
		return codes.Errorf(codes.HostRouteInvalid, "exit: routing table %d is out of range", e.Table)
	}
	if e.Priority < 1 || e.Priority+1 >= mainRulePriority {
		return codes.Errorf(codes.HostRouteInvalid, "exit: rule priorities %d and %d: both must be between 1 and %d, before the main table's rule", e.Priority, e.Priority+1, mainRulePriority-1)
	}
	return nil
}

// UseExit sends this node's default-route traffic into TunDev, the
// wg-quick way. Table Table holds `default dev TunDev` and a throw route
// for each Exclude prefix, and two rules lead to it:
//
//	priority P:   from all lookup main suppress_prefixlength 0   (main's non-default routes, e.g. the LAN, still win)
//	priority P+1: from all not fwmark Mark lookup Table
//
// Nebula's own underlay packets carry Mark, so they skip Table and take
// main's default route; an excluded address is thrown back to main's
// rules the same way. UseExit is idempotent: run again, with another
// Exclude say, the table and the rules match e exactly (a route or rule of
// an earlier e that e lacks is deleted). Routes go in before rules, so the
// table is never used half built. The main table is never touched. IPv4
// only.
func (h *Host) UseExit(e Exit) error {
	if err := e.validate(); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	tun, err := netlink.LinkByName(e.TunDev)
	if err != nil {
		return codes.Errorf(codes.HostRouteApply, "exit: find the TUN device %s: %w", e.TunDev, err)
	}
	if err := syncRoutes(e.Table, exitRoutes(e, tun.Attrs().Index)); err != nil {
		return codes.Wrap(codes.HostRouteApply, err)
	}
	if err := syncRules(e, exitRules(e)); err != nil {
		return codes.Wrap(codes.HostRouteApply, err)
	}
	return nil
}

// ExitOff deletes exactly what UseExit made: its two rules (at Priority
// and Priority+1, recognised by their tables) first, so traffic is back on
// the main table at once, then Table's IPv4 routes. The main table is
// never touched, so the routes are as they were before UseExit. It keeps
// no state, so it also undoes what a previous meshd process made, and is
// safe to call when there is nothing to undo.
func (h *Host) ExitOff(e Exit) error {
	if err := e.validateOwned(); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := syncRules(e, nil); err != nil {
		return codes.Wrap(codes.HostRouteApply, err)
	}
	if err := syncRoutes(e.Table, nil); err != nil {
		return codes.Wrap(codes.HostRouteApply, err)
	}
	return nil
}

// exitRoutes are the routes table e.Table must hold.
func exitRoutes(e Exit, tunIndex int) []netlink.Route {
	rs := []netlink.Route{{
		Table:     e.Table,
		Family:    netlink.FAMILY_V4,
		Type:      unix.RTN_UNICAST,
		Scope:     netlink.SCOPE_LINK,
		LinkIndex: tunIndex,
		Dst:       &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)},
	}}
	for _, p := range e.Exclude {
		p = p.Masked()
		rs = append(rs, netlink.Route{
			Table:  e.Table,
			Family: netlink.FAMILY_V4,
			Type:   unix.RTN_THROW,
			Dst:    &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), 32)},
		})
	}
	return rs
}

// routeKey is what tells two routes of meshd's table apart.
func routeKey(r netlink.Route) string {
	dst := "0.0.0.0/0"
	if r.Dst != nil {
		ones, _ := r.Dst.Mask.Size()
		dst = fmt.Sprintf("%s/%d", r.Dst.IP.To4(), ones)
	}
	if r.Type == unix.RTN_THROW {
		return "throw " + dst
	}
	return fmt.Sprintf("type %d %s dev %d via %s", r.Type, dst, r.LinkIndex, r.Gw)
}

// syncRoutes makes table hold exactly the IPv4 routes want: it deletes the
// others, then adds what is missing.
func syncRoutes(table int, want []netlink.Route) error {
	have, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("exit: list routing table %d: %w", table, err)
	}
	wanted := map[string]bool{}
	for _, r := range want {
		wanted[routeKey(r)] = true
	}
	present := map[string]bool{}
	for _, r := range have {
		k := routeKey(r)
		if wanted[k] && !present[k] {
			present[k] = true
			continue
		}
		if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("exit: delete route %s from table %d: %w", k, table, err)
		}
	}
	for _, r := range want {
		k := routeKey(r)
		if present[k] {
			continue
		}
		if err := netlink.RouteAdd(&r); err != nil {
			return fmt.Errorf("exit: add route %s to table %d: %w", k, table, err)
		}
		present[k] = true
	}
	return nil
}

// exitRules are the two rules UseExit puts in, in the order it adds them.
func exitRules(e Exit) []netlink.Rule {
	suppress := netlink.NewRule()
	suppress.Family = netlink.FAMILY_V4
	suppress.Priority = e.Priority
	suppress.Table = unix.RT_TABLE_MAIN
	suppress.SuppressPrefixlen = 0

	mark := netlink.NewRule()
	mark.Family = netlink.FAMILY_V4
	mark.Priority = e.Priority + 1
	mark.Table = e.Table
	mark.Mark = e.Mark
	mark.Invert = true
	return []netlink.Rule{*suppress, *mark}
}

// ours reports whether r is one of the rules UseExit makes for e, in any
// version: at e.Priority the main table's lookup with
// suppress_prefixlength 0, at e.Priority+1 the lookup of e.Table.
func ours(r netlink.Rule, e Exit) bool {
	switch r.Priority {
	case e.Priority:
		return r.Table == unix.RT_TABLE_MAIN && r.SuppressPrefixlen == 0
	case e.Priority + 1:
		return r.Table == e.Table
	}
	return false
}

// ruleKey is what tells two of meshd's rules apart.
func ruleKey(r netlink.Rule) string {
	mask := uint32(0xffffffff)
	if r.Mask != nil {
		mask = *r.Mask
	}
	if r.Mark == 0 {
		mask = 0
	}
	return fmt.Sprintf("priority %d invert %t fwmark %#x/%#x lookup %d suppress_prefixlength %d",
		r.Priority, r.Invert, r.Mark, mask, r.Table, r.SuppressPrefixlen)
}

// syncRules makes meshd's rules for e (see ours) exactly want: it deletes
// the others, then adds what is missing, in want's order.
func syncRules(e Exit, want []netlink.Rule) error {
	have, err := netlink.RuleList(netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("exit: list IPv4 rules: %w", err)
	}
	present := map[string]bool{}
	for _, r := range have {
		if !ours(r, e) {
			continue
		}
		k := ruleKey(r)
		if slices.ContainsFunc(want, func(w netlink.Rule) bool { return ruleKey(w) == k }) && !present[k] {
			present[k] = true
			continue
		}
		if err := netlink.RuleDel(&r); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("exit: delete rule %s: %w", k, err)
		}
	}
	for _, r := range want {
		k := ruleKey(r)
		if present[k] {
			continue
		}
		if err := netlink.RuleAdd(&r); err != nil {
			return fmt.Errorf("exit: add rule %s: %w", k, err)
		}
		present[k] = true
	}
	return nil
}
