package mesh

import (
	"fmt"
	"net"
	"net/netip"
)

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
