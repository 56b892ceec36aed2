package gossip

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/hashicorp/memberlist"

	"github.com/meshd/meshd/codes"
)

// SetKeys makes this node's keyring exactly keys, the first being the
// primary (the one that encrypts): missing keys are installed, the
// primary is switched, and keys not listed are removed, all locally.
// Nothing is sent: serf's KeyManager works through gossip queries that
// every holder of the current key answers, a removed node included, so
// meshd distributes keys over mTLS and each node calls SetKeys itself.
// A key problem is codes.GossipKey; the keys are never in the error.
func (g *Gossip) SetKeys(keys [][]byte) error {
	if g.isClosed() {
		return fmt.Errorf("gossip set keys: %w", errShutdown)
	}
	if len(keys) == 0 {
		return codes.Wrap(codes.GossipKey, errors.New("gossip set keys: at least one key is required"))
	}
	for i, k := range keys {
		if err := memberlist.ValidateKey(k); err != nil {
			return codes.Errorf(codes.GossipKey, "gossip set keys: keys[%d]: %d bytes, want 16, 24 or 32", i, len(k))
		}
	}
	for _, k := range keys {
		if err := g.ring.AddKey(bytes.Clone(k)); err != nil { // adding an installed key is a no-op
			return codes.Wrap(codes.GossipKey, errors.New("gossip set keys: install failed"))
		}
	}
	if err := g.ring.UseKey(keys[0]); err != nil {
		return codes.Wrap(codes.GossipKey, errors.New("gossip set keys: switching the primary failed"))
	}
	for _, have := range g.Keys() { // a copy: RemoveKey rewrites the ring's slice
		if !containsKey(keys, have) {
			if err := g.ring.RemoveKey(have); err != nil {
				return codes.Wrap(codes.GossipKey, errors.New("gossip set keys: removing an old key failed"))
			}
		}
	}
	return nil
}

// Keys returns copies of the installed keys, the primary first.
func (g *Gossip) Keys() [][]byte {
	primary := g.ring.GetPrimaryKey()
	out := [][]byte{bytes.Clone(primary)}
	for _, k := range g.ring.GetKeys() {
		if !bytes.Equal(k, primary) {
			out = append(out, bytes.Clone(k))
		}
	}
	return out
}

func containsKey(keys [][]byte, k []byte) bool {
	for _, x := range keys {
		if bytes.Equal(x, k) {
			return true
		}
	}
	return false
}
