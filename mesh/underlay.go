package mesh

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sort"

	"github.com/meshd/meshd/codes"
)

// ChooseUnderlay picks this node's underlay IP. A pinned address must be
// assigned to this machine (any 127.0.0.0/8 address counts: Linux routes the
// whole block to lo); a pin that does not resolve aborts. Without a pin the
// choice is deterministic: up, non-loopback IPv4 addresses, private ranges
// first, then by interface index and address.
func ChooseUnderlay(pinned string) (netip.Addr, error) {
	local, err := localAddrs()
	if err != nil {
		return netip.Addr{}, codes.Wrap(codes.AdvertiseAddr, err)
	}
	if pinned != "" {
		ip, err := netip.ParseAddr(pinned)
		if err != nil {
			return netip.Addr{}, codes.Wrap(codes.AdvertiseAddr, fmt.Errorf("%q is not an IP address", pinned))
		}
		ip = ip.Unmap()
		if ip.IsLoopback() || (!ip.IsUnspecified() && containsAddr(local, ip)) {
			return ip, nil
		}
		return netip.Addr{}, codes.Wrap(codes.AdvertiseAddr, fmt.Errorf("%s is not assigned to any interface of this machine", ip))
	}
	var cands []candidate
	for _, c := range local {
		if c.ip.Is4() && !c.ip.IsLoopback() && !c.ip.IsLinkLocalUnicast() && c.up {
			cands = append(cands, c)
		}
	}
	if len(cands) == 0 {
		return netip.Addr{}, codes.Wrap(codes.AdvertiseAddr, errors.New("no usable IPv4 address on any interface; pass --advertise-addr"))
	}
	sort.SliceStable(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.ip.IsPrivate() != b.ip.IsPrivate() {
			return a.ip.IsPrivate()
		}
		if a.index != b.index {
			return a.index < b.index
		}
		return a.ip.Less(b.ip)
	})
	return cands[0].ip, nil
}

// IsLocal reports whether ip can be bound as a source address here.
func IsLocal(ip netip.Addr) bool {
	if ip.IsLoopback() {
		return true
	}
	local, err := localAddrs()
	return err == nil && containsAddr(local, ip)
}

type candidate struct {
	ip    netip.Addr
	index int
	up    bool
}

func localAddrs() ([]candidate, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	var out []candidate
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			pn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(pn.IP)
			if !ok {
				continue
			}
			out = append(out, candidate{ip: ip.Unmap(), index: ifc.Index, up: ifc.Flags&net.FlagUp != 0})
		}
	}
	return out, nil
}

func containsAddr(cs []candidate, ip netip.Addr) bool {
	for _, c := range cs {
		if c.ip == ip {
			return true
		}
	}
	return false
}
