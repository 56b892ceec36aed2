// Package mesh embeds Nebula (github.com/slackhq/nebula v1.10.3) in meshd:
// the overlay config rendered from a typed struct, start, reload with
// read-back verification, the certificate blocklist, and tunnel state; and
// the choice of this node's underlay address through netlink (underlay.go,
// DESIGN §2's "NIC selection", §10's route to the first seed) and the
// preflight check that a TUN device can be created (tuncheck.go).
// Production runs one instance per process, on a kernel TUN device; tests
// run several userspace (gvisor) instances in one process.
//
// Import rule (deps_test.go): may import codes and pki; nothing else of
// meshd. Besides the standard library it uses Nebula and its dependencies
// (logrus, gvisor, yaml.v3, vishvananda/netlink, x/sys/unix). Nothing in
// meshd below agent imports it.
//
// # Lifecycle
//
//	m, err := mesh.Start(cfg, log)   // Validate, inspect the certificate, Render, nebula.Main, Start, Verify
//	err = m.Reload(next)             // RestartNeeded, or reload + Verify, rolled back on mismatch
//	err = m.WaitTunnel(ctx, lighthouseIP)
//	m.Stop()                         // kernel mode only; see below
//
// Config is plain data; Render turns it into the Nebula YAML
// (testdata/*.yaml are the golden files, `go test ./mesh -run Render
// -update` rewrites them). Nebula's ReloadConfigString returns only YAML
// errors and merely logs a rejected setting, so every Start and Reload
// reads the state back (Verify) and a reload that does not verify is
// undone; see Verify for what can and cannot be read back.
//
// # Config and the Nebula keys it becomes
//
//	Config field      Nebula key                              on Reload
//	CACert            pki.ca                                  live
//	Cert, Key         pki.cert, pki.key                       live if the overlay address and curve stay
//	Blocklist         pki.blocklist (sorted, de-duplicated)   live; tunnels drop within connection_alive_interval
//	Lighthouses       lighthouse.hosts + static_host_map      live
//	StaticHosts       static_host_map (merged, sorted)        live
//	LocalAllowList    lighthouse.local_allow_list             live
//	AmLighthouse      lighthouse.am_lighthouse                restart (codes.RestartNeeded)
//	ListenHost/Port   listen.host, listen.port                restart
//	SocketBuffer      listen.read_buffer, listen.write_buffer live
//	SoMark            listen.so_mark (0: not written)         live
//	TunDev, MTU       tun.dev, tun.mtu (kernel mode only)     dev: restart; mtu: live
//	UnsafeRoutes      tun.unsafe_routes (sorted by route)     live; kernel routes of Install entries follow
//	Inbound/Outbound  firewall.inbound/outbound               live
//	(Cert's routes)   firewall.meshd_routable                 live; rebuilds Nebula's firewall (see below)
//	GossipPort        a rule first in firewall.in/outbound    live
//	Userspace         the device factory passed to Main       restart
//	Fast              timers.*, lighthouse.interval           restart
//	Routines          routines (default 1)                    restart
//
// DefaultConfig's firewall (AnyAny) allows any port and protocol both
// ways to and from every holder of a valid cluster certificate, the
// prefixes this node routes included (local_cidr any).
//
// Fixed by meshd: punchy.punch and punchy.respond on, punchy.delay
// PunchDelay, handshakes.query_buffer QueryBuffer, pki.disconnect_invalid
// on, cipher aes, logging at info (bridged, see below).
//
// # Routes (unsafe networks)
//
// A node may route prefixes outside the overlay for it: a LAN behind it,
// or 0.0.0.0/0 as an exit node. Its certificate holds them as unsafe
// networks (pki.NebulaRequest.Routes); every other node's UnsafeRoutes
// point each prefix at the node that carries it. Nebula then:
//
//   - on the other nodes, sends what the kernel hands the TUN device for
//     the prefix to Via (kernel mode: an entry with Install also adds the
//     kernel route; userspace mode routes nothing by them), and accepts
//     packets from the prefix only from a peer whose certificate holds it;
//   - on the carrier, lets through only traffic for its own overlay
//     address and its certificate's unsafe networks, and a rule without
//     local_cidr then matches its overlay address only
//     (FirewallRule.LocalCIDR).
//
// Nebula takes both from the certificate it loaded, and its firewall
// from the one it had when the firewall was built: see the caveats.
//
// # Nebula v1.10.3 caveats this package works around or documents
//
//   - Stopping a userspace instance calls os.Exit(2) inside Nebula (its
//     device pipe returns io.EOF, not os.ErrClosed). Stop therefore leaves a
//     userspace instance running; tests never stop one, and scenarios that
//     stop or restart nodes run them as subprocesses.
//   - Stopping a kernel instance leaves reader threads blocked holding the
//     TUN device and the UDP port; Stop kicks them loose and waits until
//     both are released (research §1, upstream issue #975).
//   - Nebula keeps the cipher in a package global, so every instance in a
//     process must use the same one: Render always writes "aes".
//   - On reload Nebula rebuilds its firewall only when the firewall
//     section changed, but the firewall's addresses this node may handle
//     come from the certificate. Render writes the certificate's unsafe
//     networks into firewall.meshd_routable, a key Nebula ignores, so a
//     certificate with other routes changes the section and the firewall
//     is rebuilt (TestKernelUnsafeRoutes fails without it).
//   - Peers accept a packet from a node whose source address lies in one
//     of its certificate's unsafe networks. An exit node (0.0.0.0/0) can
//     therefore send packets from any address, overlay addresses
//     included, that its peers take as its own: a cidr firewall rule does
//     not tell it from the node whose address it uses (host and group
//     rules do). pki.CheckRoute refuses every other prefix that overlaps
//     the overlay.
//   - nebula.Main rewrites its logger's level and formatter, so every
//     instance gets its own logrus.Logger, bridged to slog with the tag
//     component=mesh and lib=nebula (warnings and errors as such, Nebula's
//     info as debug; logrus fields as attributes).
//     Values that look like PEM are redacted; the rendered YAML, which
//     holds the private key, is never logged.
//   - Nebula has data races of its own (noise.go's endianness global,
//     firewall reload against the packet path). This package's tests that
//     run Nebula therefore run WITHOUT -race: the Makefile leaves mesh out
//     of the -race run, and under -race those tests skip themselves (the
//     Render and Validate tests still run).
//   - Userspace mode runs meshd's own gvisor stack on Nebula's user device
//     (netstack.go, built as Nebula's service package builds its own),
//     since the service package offers no UDP socket: Listen and
//     ListenPacket bind the certificate's first network's address (or the
//     unspecified one standing for it) at a non-zero port.
//
// The package holds no mutable package-level state.
package mesh
