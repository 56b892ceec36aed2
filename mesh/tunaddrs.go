package mesh

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// addTunAddrs puts on the TUN device the networks of a certificate that
// Nebula took on a reload without a restart: Nebula addresses its device
// once, at start, from the certificate it starts with, and a reload that
// adds a v2 certificate's IPv6 network (a cluster moving to v2
// certificates and a dual-stack overlay, issue 34) changes what Nebula
// accepts and sends as this node but not the device. Adding the address
// (with its prefix, so the kernel routes the network into the device) is
// what Nebula's own start does (overlay/tun_linux.go addIPs, AddrReplace).
// Kernel mode only; networks already on the device are left alone, and
// none is removed (a certificate holding fewer networks needs a restart:
// Reload refuses another IPv4 address).
func (m *Mesh) addTunAddrs(nets []netip.Prefix) error {
	if !m.kernel {
		return nil
	}
	link, err := netlink.LinkByName(m.tunDev)
	if err != nil {
		return fmt.Errorf("TUN device %s: %w", m.tunDev, err)
	}
	have, err := netlink.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("addresses of %s: %w", m.tunDev, err)
	}
	on := map[netip.Addr]bool{}
	for _, a := range have {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			on[ip.Unmap()] = true
		}
	}
	for _, p := range nets {
		if on[p.Addr()] {
			continue
		}
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if err := netlink.AddrReplace(link, addr); err != nil {
			return fmt.Errorf("add %s to %s: %w", p, m.tunDev, err)
		}
		m.log.Info("overlay address added to the TUN device", "addr", p, "dev", m.tunDev)
	}
	return nil
}
