package mesh

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/meshd/meshd/pki"
)

// missingRoutes lists the kernel routes c's unsafe routes with Install
// should have on the TUN device and do not: Nebula installs them at start
// and on each reload that changes tun.unsafe_routes, and on reload only
// logs a route it failed to add. Without its route a prefix's traffic
// follows the underlay's routes, unencrypted. Kernel mode only (userspace
// mode has no device); presence only, in the main table, where Nebula puts
// them: routes Nebula removed are not looked for, since something other
// than Nebula may route a prefix into the device.
func (m *Mesh) missingRoutes(c Config) ([]string, error) {
	if !m.kernel {
		return nil, nil
	}
	var want []netip.Prefix
	for _, r := range c.UnsafeRoutes {
		if r.Install {
			want = append(want, r.Route)
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	link, err := netlink.LinkByName(m.tunDev)
	if err != nil {
		return nil, fmt.Errorf("TUN device %s: %w", m.tunDev, err)
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_V4,
		&netlink.Route{LinkIndex: link.Attrs().Index, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("routes on %s: %w", m.tunDev, err)
	}
	have := map[netip.Prefix]bool{}
	for _, r := range routes {
		if r.Dst == nil { // the default route
			have[pki.ExitRoute()] = true
			continue
		}
		a, ok := netip.AddrFromSlice(r.Dst.IP)
		ones, _ := r.Dst.Mask.Size()
		if ok {
			have[netip.PrefixFrom(a.Unmap(), ones).Masked()] = true
		}
	}
	var missing []string
	for _, p := range want {
		if !have[p] {
			missing = append(missing, p.String())
		}
	}
	return missing, nil
}
