package control

import (
	"hash/fnv"
	"slices"
)

// Spread is seeds in the order node nodeID asks them: the same control
// nodes, from one its id picks, so that a cluster's workers spread their
// calls (node list, revocations, keys, confirmation) over the control
// nodes. Every worker used to ask the first seed on record first: in a
// burst of 50 joins one follower answered all of them, each strict read
// waiting for that follower to apply the leader's latest entries (node
// list p50 1.1 s there, the leader's own read index 1 ms). A seed that
// does not answer still moves the call on to the next.
func Spread(seeds []string, nodeID string) []string {
	if len(seeds) < 2 {
		return seeds
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(nodeID))
	return rotated(seeds, int(h.Sum32()%uint32(len(seeds))))
}

// HomeFirst is Spread(seeds, nodeID) with home, when it is one of them,
// moved to the front: a worker asks the control node it enrolled through
// first, which is on its own site when it was admitted there (TestSites:
// a worker on the far site of a 100 ms round trip took 0.42 s for its
// first node list from a control node Spread picked across the link).
// Tokens already spread the seeds a joiner enrolls through (Admit), so
// the workers' calls stay spread.
func HomeFirst(seeds []string, home, nodeID string) []string {
	out := Spread(seeds, nodeID)
	i := slices.Index(out, home)
	if home == "" || i <= 0 {
		return out
	}
	return append([]string{home}, slices.Delete(slices.Clone(out), i, i+1)...)
}

// rotated is seeds starting at the k-th (modulo their number).
func rotated(seeds []string, k int) []string {
	if len(seeds) == 0 {
		return seeds
	}
	k %= len(seeds)
	return append(slices.Clone(seeds[k:]), seeds[:k]...)
}
