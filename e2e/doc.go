// Package e2e holds meshd's root-only end-to-end suite (build tag e2e): one
// network namespace per node, joined by veth pairs to a bridge in a hub
// namespace, a real TUN device per node, real meshd processes, driven only
// through `meshctl -o json`. Run it with `make e2e` (as root).
//
// Import rule (deps_test.go): may import agent/apitype, agent/localclient,
// bench/benchrec, codes, crash, gossip/gossiptest and stocknebula; nothing else of meshd. It never links the
// daemon's packages. The gossip trust test links serf and memberlist for its
// forged member (the test binary re-executed in a namespace, see runForger),
// the forged-death test forges gossip packets with gossip/gossiptest, and
// gossipFailBound reads memberlist's LAN defaults for the bounds meshd's
// gossip timers give.
package e2e
