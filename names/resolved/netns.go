package resolved

import (
	"context"
	"fmt"
	"net"
	"os"
	"syscall"
)

// selfNetNS is this process's network namespace.
const selfNetNS = "/proc/self/ns/net"

// nsID identifies a namespace: the device and inode of its /proc/*/ns file.
type nsID struct{ dev, ino uint64 }

func statNS(path string) (nsID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nsID{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nsID{}, fmt.Errorf("%s: no stat_t", path)
	}
	return nsID{dev: uint64(st.Dev), ino: st.Ino}, nil
}

// sameNetNS compares the namespaces behind two /proc/*/ns/net paths. It
// returns an error only when both are readable and differ; when either
// cannot be read (a process hidden by ProtectProc=invisible, or gone)
// there is nothing to compare and the answer is nil.
func sameNetNS(self, other string) error {
	a, err := statNS(self)
	if err != nil {
		return nil
	}
	b, err := statNS(other)
	if err != nil {
		return nil
	}
	if a != b {
		return fmt.Errorf("%s is net:[%d] on device %d, %s is net:[%d]", other, b.ino, b.dev, self, a.ino)
	}
	return nil
}

// resolvedName is the bus name systemd-resolved owns.
const resolvedName = "org.freedesktop.resolve1"

// checkNetNS refuses when the resolved on this bus runs in another network
// namespace than this process. A bus daemon that cannot name resolved's
// PID means resolved is not there.
func (c *Client) checkNetNS(ctx context.Context, op, remedyDNS string) error {
	var pid uint32
	err := c.conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetConnectionUnixProcessID", 0, resolvedName).Store(&pid)
	if err != nil {
		return classify(op, err, remedyDNS)
	}
	if err := sameNetNS(selfNetNS, fmt.Sprintf("/proc/%d/ns/net", pid)); err != nil {
		return &Error{Op: op, Kind: ErrOtherNetNS, Err: err, Remedy: fmt.Sprintf(
			"resolved (PID %d) would apply this ifindex to a link of its own namespace, so meshd changes nothing; "+
				"this is expected when meshd runs in a test network namespace", pid)}
	}
	return nil
}

// checkLinkHere refuses an ifindex that is not IfName in this namespace:
// resolved would configure whatever link has that index.
func checkLinkHere(l Link, op string) error {
	ifi, err := net.InterfaceByIndex(l.IfIndex)
	if err == nil && ifi.Name == l.IfName {
		return nil
	}
	if err == nil {
		err = fmt.Errorf("ifindex %d is %s here", l.IfIndex, ifi.Name)
	}
	return &Error{Op: op, Kind: ErrWrongLink, Err: err,
		Remedy: "look the index up again by name after the overlay interface is (re)created"}
}
