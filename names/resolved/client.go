package resolved

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/godbus/dbus/v5"
)

// D-Bus names of resolved's Manager.
const (
	managerPath  = dbus.ObjectPath("/org/freedesktop/resolve1")
	managerIface = "org.freedesktop.resolve1.Manager"
)

// Client talks to systemd-resolved over one bus connection. It holds no
// other state and is safe for concurrent use; Close it when done.
type Client struct {
	conn *dbus.Conn
}

// SystemBusAddress is the system bus's D-Bus address:
// $DBUS_SYSTEM_BUS_ADDRESS, else the standard socket.
func SystemBusAddress() string {
	if a := os.Getenv("DBUS_SYSTEM_BUS_ADDRESS"); a != "" {
		return a
	}
	return "unix:path=/run/dbus/system_bus_socket"
}

// DialSystem connects to the system bus (SystemBusAddress).
func DialSystem(ctx context.Context) (*Client, error) { return Dial(ctx, SystemBusAddress()) }

// Dial connects to the bus at a D-Bus address ("unix:path=/run/dbus/system_bus_socket";
// tests pass a private bus). ctx bounds the dial and authentication only,
// as with net.Dialer.DialContext. A bus that is not there is ErrNotRunning.
func Dial(ctx context.Context, addr string) (*Client, error) {
	connCtx, cancel := context.WithCancel(context.Background())
	// godbus closes a connection when its context ends; tie that to ctx
	// only until the connection is up.
	stop := context.AfterFunc(ctx, cancel)
	conn, err := dbus.Connect(addr, dbus.WithContext(connCtx))
	if !stop() || err != nil {
		cancel()
		if err == nil {
			err = ctx.Err()
		}
		return nil, classify("connect to the D-Bus bus at "+addr, err, "")
	}
	return &Client{conn: conn}, nil
}

// Close closes the bus connection.
func (c *Client) Close() error { return c.conn.Close() }

// manager is resolved's Manager object.
func (c *Client) manager() dbus.BusObject { return c.conn.Object(resolvedName, managerPath) }

// Ensure makes resolved route l.Domain (routing-only, "~prod.mesh") on the
// link to l.Server, with the link's DefaultRoute false, LLMNR, MulticastDNS
// and DNSSEC off. It reads the link's properties first and calls only the
// setters whose value differs, so calling it every 30 s neither costs much
// nor flushes resolved's caches. changed says whether it set anything; on
// an error it may have set some values and not others, and the next call
// completes the rest.
func (c *Client) Ensure(ctx context.Context, l Link) (changed bool, err error) {
	if err := l.Validate(); err != nil {
		return false, err
	}
	op := "configure DNS for " + l.String() + " in systemd-resolved"
	dns := fmt.Sprintf("%v for ~%s", l.Server, l.Domain)
	if err := checkLinkHere(l, op); err != nil {
		return false, err
	}
	if err := c.checkNetNS(ctx, op, dns); err != nil {
		return false, err
	}
	var path dbus.ObjectPath
	if err := c.manager().CallWithContext(ctx, managerIface+".GetLink", 0, int32(l.IfIndex)).Store(&path); err != nil {
		return false, classify(op, err, dns)
	}
	var props map[string]dbus.Variant
	err = c.conn.Object(resolvedName, path).CallWithContext(ctx, "org.freedesktop.DBus.Properties.GetAll", 0, linkIface).Store(&props)
	if err != nil {
		return false, classify(op, err, dns)
	}
	have, err := stateFromProps(props)
	if err != nil {
		return false, fmt.Errorf("%s: read %s: %w", op, path, err)
	}
	for _, s := range diff(have, want(l)) {
		if err := c.manager().CallWithContext(ctx, managerIface+"."+s.method, 0, int32(l.IfIndex), s.arg).Err; err != nil {
			return changed, classify(op+": "+s.method, err, dns)
		}
		changed = true
	}
	return changed, nil
}

// Revert undoes everything set on the link over D-Bus (RevertLink). A link
// resolved no longer knows is not an error: resolved forgets a link's
// settings with the link.
func (c *Client) Revert(ctx context.Context, ifindex int) error {
	op := fmt.Sprintf("revert DNS of ifindex %d in systemd-resolved", ifindex)
	if err := c.checkNetNS(ctx, op, ""); err != nil {
		return err
	}
	err := classify(op, c.manager().CallWithContext(ctx, managerIface+".RevertLink", 0, int32(ifindex)).Err, "")
	if errors.Is(err, ErrLinkUnknown) {
		return nil
	}
	return err
}

// Ensure is Client.Ensure on a connection to the system bus for this call.
func Ensure(ctx context.Context, l Link) (changed bool, err error) {
	c, err := DialSystem(ctx)
	if err != nil {
		return false, err
	}
	defer c.Close()
	return c.Ensure(ctx, l)
}

// Revert is Client.Revert on a connection to the system bus for this call.
func Revert(ctx context.Context, ifindex int) error {
	c, err := DialSystem(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Revert(ctx, ifindex)
}
