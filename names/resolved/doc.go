// Package resolved points the host's systemd-resolved at meshd's DNS server
// for the cluster's domain only: split DNS, the systemd way (issue 30, item 2).
//
// It speaks systemd-resolved's D-Bus API (org.freedesktop.resolve1, the
// Manager object /org/freedesktop/resolve1) on the system bus. It never runs
// resolvectl or busctl and never touches /etc/resolv.conf: resolved owns the
// host's resolver configuration, and a link's per-link DNS settings are the
// documented way for a VPN to add a routing domain next to it.
//
// # What Ensure sets on the overlay link
//
//	SetLinkDNS          ia(iay)  [Server]                 meshd's DNS on the overlay address, port 53
//	SetLinkDomains      ia(sb)   [("prod.mesh", true)]    "~prod.mesh": routing-only, no search domain
//	SetLinkDefaultRoute ib       false                    no other name goes to meshd
//	SetLinkLLMNR        is       "no"                     nothing to find by multicast on a TUN
//	SetLinkMulticastDNS is       "no"
//	SetLinkDNSSEC       is       "no"                     meshd's zone is unsigned
//
// Ensure reads the link's properties (GetLink, then the link object's
// DNS, Domains, DefaultRoute, LLMNR, MulticastDNS, DNSSEC) and calls only
// the setters whose value differs: each setter makes resolved flush the
// link's caches, so a loop that calls Ensure every 30 s must not set
// unchanged values. Revert calls RevertLink, which drops everything meshd
// set; resolved also forgets a link when its interface goes away.
//
// # Errors
//
// Every failure is an *Error whose Kind is one of ErrNotRunning,
// ErrAccessDenied, ErrLinkUnknown, ErrLinkBusy, ErrWrongLink or
// ErrOtherNetNS (test with errors.Is), with a Remedy for the operator.
// ErrNotRunning (no system bus, or nobody owns org.freedesktop.resolve1)
// means meshd changes nothing on the host; meshd's status then says how to
// point a resolver at meshd by hand.
//
// # The namespace guard
//
// A process in its own network namespace (the e2e tests run meshd under
// `ip netns exec`) still sees the host's /run/dbus/system_bus_socket, so the
// resolved it reaches serves another namespace, and an ifindex from this
// namespace names an unrelated link there. Before any call that changes
// something, the client compares /proc/self/ns/net with resolved's (its PID
// from the bus daemon's GetConnectionUnixProcessID) and refuses with
// ErrOtherNetNS when both are readable and differ. When resolved's /proc
// entry is hidden (the packaged unit runs with ProtectProc=invisible) the
// check cannot be made and the client proceeds: that is the packaged,
// single-namespace case. The PID is only meaningful in a shared PID
// namespace, which the packaged unit and the e2e tests both have. Ensure
// also refuses when IfIndex is not IfName in this namespace (ErrWrongLink).
//
// # Lifecycle
//
// A Client holds one bus connection (Dial, DialSystem, Close) and keeps no
// other state: it is safe for concurrent use. The package-level Ensure and
// Revert dial the system bus for one call and close it, which is cheap
// enough for a 30 s loop and survives restarts of the bus or of resolved.
//
// # Permissions
//
// resolved grants these calls to root, and to anyone else only through
// polkit (actions org.freedesktop.resolve1.set-dns-servers, set-domains,
// set-default-route, set-llmnr, set-mdns, set-dnssec, revert). It checks
// CAP_NET_ADMIN first, but sd-bus trusts capabilities only when the bus
// reports them, and dbus-daemon does not: measured on Debian bookworm
// (systemd 252), a meshd user with CAP_NET_ADMIN is refused ("Permission
// denied" without polkitd, "Interactive authentication required" with
// it) unless a polkit rule allows user meshd those actions.
//
// Import rule (deps_test.go): may import no meshd package. Besides the
// standard library it uses github.com/godbus/dbus/v5; the caller attaches
// codes.
package resolved
