// Package hostroute is the host kernel's side of meshd's subnet routes and
// exit nodes (issue 33). Nebula, in process on its kernel TUN device,
// carries the packets; this package only sets the kernel up around it:
//
//   - a node that carries routes (a subnet router, or an exit node carrying
//     0.0.0.0/0) forwards what arrives from the overlay and masquerades it
//     out of the interface that reaches the prefix (Host.ApplyForward,
//     Host.RemoveForward; forward.go, nft.go, devconf.go);
//   - a node that uses an exit node sends its default-route traffic into the
//     TUN device without ever routing the tunnel's own underlay packets into
//     itself (Host.UseExit, Host.ExitOff; exit.go).
//
// Import rule (deps_test.go): may import codes; nothing else of meshd.
// Besides the standard library it uses github.com/vishvananda/netlink (links,
// routes, rules, and its nl package for the one message it lacks) and
// github.com/google/nftables. It never runs ip or nft.
//
// # What it owns
//
//   - The nftables table "meshd" of family ip: one chain, postrouting (type
//     nat, hook postrouting, priority srcnat), with one rule per routed
//     prefix and egress interface:
//     `ip saddr OVERLAY ip daddr PREFIX oifname EGRESS masquerade` (no daddr
//     match for 0.0.0.0/0). Only overlay members' traffic is masqueraded.
//     The table is replaced whole in one nftables transaction, so a change
//     never leaves a gap nor a duplicate.
//   - IPv4 forwarding of the TUN device and of each egress interface, with
//     the value each had before, to put back.
//   - The exit's routing table (Exit.Table) and its two rules at
//     Exit.Priority and Exit.Priority+1 (the wg-quick scheme). The main
//     table is never touched.
//
// # Why /proc/sys is not written
//
// meshd runs under systemd with ProtectKernelTunables=yes: /proc/sys is
// read-only for it. Forwarding is therefore set per interface over
// rtnetlink instead (RTM_SETLINK with IFLA_AF_SPEC, AF_INET,
// IFLA_INET_CONF, IPV4_DEVCONF_FORWARDING), and read back from RTM_GETLINK;
// net.ipv4.ip_forward (conf/all) is left alone. The kernel decides to
// forward by the receiving interface's own value, so the TUN device's lets
// the overlay's packets out and the egress interface's lets the answers
// back in.
//
// # State and crashes
//
// A Host remembers, in memory only, the forwarding value each interface had
// before ApplyForward set it. A crash or kill therefore leaves forwarding on
// for those interfaces; the next start's ApplyForward or RemoveForward puts
// the nftables table right (it is replaced or deleted whole), but cannot
// know the old forwarding values. UseExit and ExitOff keep no state: the
// table and the two rule priorities are meshd's, so the next start's
// UseExit or ExitOff puts them right from what the kernel holds.
//
// IPv4 only: IPv6 prefixes are refused (codes.HostRouteInvalid).
//
// # Errors
//
// A setting this host cannot carry (a prefix not IPv4, unroutable here or
// routed back into the TUN device, no default route for 0.0.0.0/0, an exit
// table or priority out of range) is codes.HostRouteInvalid; a change the
// kernel refused is codes.HostRouteApply. Messages name the interface,
// prefix or rule and the kernel's error.
package hostroute
