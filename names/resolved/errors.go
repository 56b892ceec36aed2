package resolved

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"github.com/godbus/dbus/v5"
)

// The kinds of failure a caller branches on. They are Kinds of *Error; test
// them with errors.Is.
var (
	// ErrNotRunning: no system bus, or systemd-resolved does not own
	// org.freedesktop.resolve1. meshd changes nothing on the host.
	ErrNotRunning = errors.New("systemd-resolved is not running")
	// ErrAccessDenied: resolved (root, else polkit; see the package doc's
	// Permissions) or the bus policy refused the call.
	ErrAccessDenied = errors.New("systemd-resolved refused the change")
	// ErrLinkUnknown: resolved has no link with that ifindex (not yet, or
	// no longer). Revert treats it as success.
	ErrLinkUnknown = errors.New("systemd-resolved does not know the link")
	// ErrLinkBusy: systemd-networkd manages the link's DNS, so resolved
	// takes no per-link settings over D-Bus for it.
	ErrLinkBusy = errors.New("the link's DNS is managed by systemd-networkd")
	// ErrWrongLink: the ifindex is not the named interface in this
	// network namespace.
	ErrWrongLink = errors.New("the ifindex does not name the overlay interface here")
	// ErrOtherNetNS: the resolved on this bus serves another network
	// namespace (see the package doc's namespace guard).
	ErrOtherNetNS = errors.New("systemd-resolved serves another network namespace")
)

// Error is every failure of this package: what was attempted, which kind
// of failure it was, the underlying error (a D-Bus or system error, or
// nil), and what an operator can do about it.
type Error struct {
	Op     string // "configure DNS for nebula1 (ifindex 7)"
	Kind   error  // one of the Err* sentinels
	Err    error  // the cause underneath, or nil
	Remedy string // for the operator; meshd's status shows it
}

func (e *Error) Error() string {
	msg := e.Op + ": " + e.Kind.Error()
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Remedy != "" {
		msg += "; " + e.Remedy
	}
	return msg
}

// Unwrap gives errors.Is both the Kind and the cause.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// D-Bus error names that decide the Kind. resolved's own names are in
// systemd's bus-common-errors.h; the rest are the bus daemon's.
const (
	dbusServiceUnknown  = "org.freedesktop.DBus.Error.ServiceUnknown"
	dbusNameHasNoOwner  = "org.freedesktop.DBus.Error.NameHasNoOwner"
	dbusUnknownObject   = "org.freedesktop.DBus.Error.UnknownObject"
	dbusDisconnected    = "org.freedesktop.DBus.Error.Disconnected"
	dbusSpawnPrefix     = "org.freedesktop.DBus.Error.Spawn." // activation failed
	dbusAccessDenied    = "org.freedesktop.DBus.Error.AccessDenied"
	dbusInteractiveAuth = "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired"
	resolveNoSuchLink   = "org.freedesktop.resolve1.NoSuchLink"
	resolveLinkBusy     = "org.freedesktop.resolve1.LinkBusy"
)

// errorName returns the D-Bus error name of err, or "".
func errorName(err error) string {
	var v dbus.Error
	if errors.As(err, &v) {
		return v.Name
	}
	var p *dbus.Error
	if errors.As(err, &p) && p != nil {
		return p.Name
	}
	return ""
}

// classify turns the error of a D-Bus call into an *Error, or returns nil
// when err is nil. An error it cannot place (a timeout, a malformed reply)
// comes back wrapped with op only.
func classify(op string, err error, remedyDNS string) error {
	if err == nil {
		return nil
	}
	switch name := errorName(err); {
	case name == dbusServiceUnknown || name == dbusNameHasNoOwner || name == dbusDisconnected ||
		strings.HasPrefix(name, dbusSpawnPrefix):
		return &Error{Op: op, Kind: ErrNotRunning, Err: err, Remedy: notRunningRemedy(remedyDNS)}
	case name == dbusAccessDenied || name == dbusInteractiveAuth:
		return &Error{Op: op, Kind: ErrAccessDenied, Err: err, Remedy: "resolved takes per-link DNS from root or through polkit, " +
			"not from meshd's CAP_NET_ADMIN: install polkitd (the packages recommend it and ship the rule " +
			"/usr/share/polkit-1/rules.d/50-meshd.rules that allows user meshd the actions " +
			"org.freedesktop.resolve1.set-dns-servers, set-domains, set-default-route, set-llmnr, set-mdns, set-dnssec " +
			"and revert; docs/operations.md, Names: systemd-resolved)"}
	case name == resolveNoSuchLink || name == dbusUnknownObject:
		return &Error{Op: op, Kind: ErrLinkUnknown, Err: err, Remedy: "check that the overlay interface is up (ip link); " +
			"resolved learns new links from the kernel within moments, so the next attempt normally succeeds"}
	case name == resolveLinkBusy:
		return &Error{Op: op, Kind: ErrLinkBusy, Err: err, Remedy: "exclude the overlay interface from systemd-networkd " +
			"(no .network file matching it, or Unmanaged=yes) so that meshd can set its DNS"}
	case errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT):
		return &Error{Op: op, Kind: ErrNotRunning, Err: err, Remedy: notRunningRemedy(remedyDNS)}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// notRunningRemedy says what to do without resolved; dns is "10.1.0.1 for
// ~prod.mesh" when known.
func notRunningRemedy(dns string) string {
	r := "meshd leaves the host's DNS alone; start systemd-resolved (systemctl enable --now systemd-resolved) to get split DNS"
	if dns != "" {
		r += ", or point the host's resolver at " + dns
	}
	return r
}
