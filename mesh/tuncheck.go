package mesh

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/meshd/meshd/codes"
)

// CheckTUN creates the kernel TUN device name as Nebula would (with
// TUNSETIFF on /dev/net/tun) and removes it again by closing it: the
// device was never made persistent. It fails with codes.TunUnavailable,
// saying why: no /dev/net/tun, no CAP_NET_ADMIN, or the name held by a
// running overlay.
func CheckTUN(name string) error {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return codes.Wrap(codes.TunUnavailable, fmt.Errorf("open /dev/net/tun: %w", err))
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return codes.Wrap(codes.TunUnavailable, fmt.Errorf("TUN device name %q: %w", name, err))
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		switch {
		case errors.Is(err, unix.EPERM):
			return codes.Wrap(codes.TunUnavailable, fmt.Errorf("create TUN device %s: %w (meshd needs CAP_NET_ADMIN)", name, err))
		case errors.Is(err, unix.EBUSY):
			return codes.Wrap(codes.TunUnavailable, fmt.Errorf("create TUN device %s: %w (another overlay holds it)", name, err))
		}
		return codes.Wrap(codes.TunUnavailable, fmt.Errorf("create TUN device %s: %w", name, err))
	}
	return nil
}
