package mesh

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// ProbeOffloads asks this kernel, as Nebula v1.12.0 would at start, which
// offloads it would grant (offload.go), without starting Nebula: for
// `meshd check-config`. UDP GRO and GSO are socket options on a fresh UDP
// socket (no privilege needed). TSO and USO are asked of a TUN device
// with virtio headers that exists only while the probe holds it (a
// kernel-chosen name, never made persistent), as CheckTUN does; kernel
// false (userspace mode) skips them. A TUN probe that cannot run (no
// /dev/net/tun, no CAP_NET_ADMIN) leaves TSO and USO false and says why
// in the error; the UDP answers stand.
func ProbeOffloads(kernel bool) (Offloads, error) {
	o := Offloads{Requested: true}
	if fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0); err == nil {
		o.GRO = unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1) == nil
		o.GSO = unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT, 0) == nil
		unix.Close(fd)
	}
	if !kernel {
		return o, nil
	}
	tso, uso, err := probeTunOffloads()
	o.TSO, o.USO = tso, uso
	return o, err
}

// The TUN_F_* masks Nebula v1.12.0 asks for (overlay/tun_linux.go:
// tsoOffloadFlags, usoAndTSOOffloadFlags).
const (
	tunTSO    = unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6 | unix.TUN_F_TSO_ECN
	tunTSOUSO = tunTSO | unix.TUN_F_USO4 | unix.TUN_F_USO6
)

func probeTunOffloads() (tso, uso bool, err error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, false, fmt.Errorf("TUN offloads not probed: open /dev/net/tun: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("")
	if err != nil {
		return false, false, err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		if errors.Is(err, unix.EPERM) {
			return false, false, fmt.Errorf("TUN offloads not probed: %w (needs CAP_NET_ADMIN, as meshd has)", err)
		}
		return false, false, nil // no virtio headers: Nebula runs without TSO
	}
	if unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, tunTSOUSO) == nil {
		return true, true, nil
	}
	return unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, tunTSO) == nil, false, nil
}
