// Package pathup moves relayed overlay tunnels onto a direct path when
// the NATs between the two nodes allow one.
//
// Nebula sends a handshake to a peer's addresses and a relay request to
// its relays in the same attempt. Between two nodes behind port-preserving
// NATs the relay answers first (a hole is punched only once the
// lighthouse has told the peer to send towards this node), and Nebula
// keeps a working tunnel where it is: it never moves a relayed tunnel to
// a direct path by itself. So the pair would stay relayed for the
// tunnel's life, though a direct path opened a moment later.
//
// An Upgrader looks at the relayed tunnels when they change (and when a
// try it scheduled is due; never on a fixed tick: issue 54). For one
// it has not tried lately (and whose peer has a higher overlay address:
// of two nodes only one tries) it asks the lighthouses about the peer (which
// also has each lighthouse tell the peer to punch towards this node),
// waits for the punch (Nebula punches a second after the lighthouse asks), points the tunnel at each address the
// lighthouses hold for the peer in turn, and probes the peer through the
// tunnel. The first answer settles it: the peer switched as the first
// packet reached it that way (Nebula's roaming) and the tunnel stays
// direct. If no address answers, the tunnel is dropped on this side and
// built again at once (by the relay, if there is still no direct path),
// and the next try for that peer waits longer (Config.Backoff), so a pair
// behind symmetric NATs costs a short gap in its traffic at ever longer
// intervals, at most one every Backoff's last step. The schedule
// outlives the rebuild (whose handshake leaves the peer unrelayed for a
// moment) by Config.Forget: a peer not seen relayed for a minute starts
// from the first step when it is relayed again.
//
// Some pairs can never go direct: both nodes behind NATs, one of them
// symmetric (it gives the packets towards the peer another port than the
// one the lighthouses saw, and the other NAT drops what arrives unasked).
// Every try for them is pure loss, a rebuilt tunnel and 1.5-2 s of the
// pair's traffic. Before it tries a peer the Upgrader asks
// Overlay.NoDirect; a peer ruled out is not tried at all (no UseDirect, no
// Rebuild), counted skipped once each time it begins to be, and asked again
// at every look, so a changed answer (one of the two moved networks) puts
// it back on its schedule. Not knowing is no reason: NoDirect answers false
// and the peer is tried as before. agent/member answers it from the NAT
// each node learns with its own path check and reports in gossip.
//
// agent/member adapts the overlay (mesh.Mesh) and the probe to it.
//
// Import rule (deps_test.go): may import no meshd package.
package pathup
