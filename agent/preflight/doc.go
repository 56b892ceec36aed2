// Package preflight is what a join checks before it spends anything, run
// one by one by `meshctl join --plan` (Run) and by the join itself (Env's
// methods): the token (format, version, expiry, and whether a wrong clock
// or the token is at fault), this machine's identity, the underlay
// address and why it was chosen, the ports and TUN device free, the state
// dir writable with room, each seed reachable and pinned to the token's
// CA, the clock against a seed, and the admission (token unused, name
// free, asked of a pinned seed, which consumes and records nothing).
//
// Import rule (deps_test.go): may import agent/apitype, agent/config,
// agent/statedir, codes, enroll, mesh, netcheck and pki; nothing else of meshd. Only
// agent imports it.
package preflight
