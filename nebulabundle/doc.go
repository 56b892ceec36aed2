// Package nebulabundle renders what a member that runs stock Nebula needs
// to join the overlay (issue 35): a phone, a router or any system that
// runs the nebula binary of the version meshd embeds (v1.12.0) instead of
// meshd. It is pure: no network, no raft, no clock. Callers (later: the
// enroll flow that spends a `--nebula-only` token, `meshctl
// nebula-bundle`) decide what goes in; this package writes it.
//
// Import rule (deps_test.go): may import no meshd package. It imports no
// Nebula package either, so meshctl, which must not link Nebula
// (deps_test.go's forbiddenInMeshctl), can write bundles: keys are made
// with crypto/ecdh and written in Nebula's PEM framing by hand, and the
// firewall rule is a type of its own (Rule, convertible from and to
// mesh.FirewallRule). Besides the standard library it uses
// go.yaml.in/yaml/v3 (already in meshctl) and github.com/skip2/go-qrcode.
//
// # A bundle directory
//
//	ca.crt       Bundle.CACerts: the CA bundle (two CAs during a CA rotation), 0644
//	host.crt     Bundle.Cert: the host certificate, 0644
//	host.key     Bundle.Key: the private key, 0600, only when the bundle carries it
//	config.yml   Bundle.ConfigYAML(), 0644
//
// The directory is made 0700 when missing. Each file is written whole
// (temp file, fsync, rename) and WriteDir checks everything before it
// writes anything; it never replaces a host.key with a different one
// (ErrKeyExists): a device that keeps its own key keeps it.
//
// # config.yml (keys as in Nebula v1.11.0's and v1.12.0's examples/config.yml)
//
//	Bundle field                 Nebula key
//	PKIDir ("" = bare names)     pki.ca, pki.cert, pki.key (file paths, never inline PEM)
//	Lighthouses                  lighthouse.hosts (IPv4 overlay), static_host_map (both overlays)
//	StaticHosts                  static_host_map
//	Relays                       relay.relays (use_relays true, am_relay false)
//	ListenPort                   listen.port (host "::", port 0 = any)
//	MTU                          tun.mtu (0: Nebula's default, 1300; tun.dev left to Nebula)
//	Inbound / Outbound           firewall.inbound / firewall.outbound (nil outbound = any)
//
// lighthouse.am_lighthouse is false, punchy.punch and punchy.respond are
// true. Maps and lists are sorted, so the same Bundle always renders the
// same text (testdata/*.yml, golden).
//
// # Choices that matter
//
//   - The pki paths are bare names by default, and Nebula resolves a
//     relative path against its working directory, not the config's: run
//     it from the bundle directory, or set PKIDir to where the files will
//     live on the device (/etc/nebula). TestStockNebulaRelativePaths shows
//     both.
//   - Only the IPv4 overlay address of a lighthouse goes into
//     lighthouse.hosts; the IPv6 one goes into the static host map beside
//     it, as meshd does for its own members ("The dual-stack overlay and
//     v2 certificates" in docs/architecture.md). A v1 (IPv4-only) device
//     given IPv6 entries only warns.
//   - Nothing here puts a secret in an error or a log: errors name the
//     file and the kind of problem, never PEM text.
package nebulabundle
