package control

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/pki"
)

// A rotation decides on what members state about themselves, and gossip
// carries those statements. Gossip cannot tell who wrote one: a member
// that was taken (its Nebula certificate and gossip key) can advertise
// another node's overlay address and speak for it. So a statement that
// moves a rotation on is signed with the member's TLS key (pki.Attest)
// and checked here against the key raft recorded at admission, and a
// member holds a rotation up only while a direct probe of its record's
// overlay address (Nebula authenticates the answer with that node's
// certificate) finds it up.

// recordKey is the PKIX DER of n's TLS key: recorded at admission, or
// for a record older than that field the key its leaf on record
// certifies.
func recordKey(n state.Node) []byte {
	if len(n.TLSPublicKey) > 0 {
		return n.TLSPublicKey
	}
	pub, _ := pki.PublicKeyDER(n.TLSCert) // nil when unparsable: nothing verifies
	return pub
}

// attested reports whether sig is n's signature of statement (of kind,
// bound to nonce).
func attested(n state.Node, kind string, nonce, statement, sig []byte) bool {
	return len(sig) > 0 && pki.VerifyAttestation(recordKey(n), kind, nonce, statement, sig) == nil
}

// KeyringStatement is what a member signs to say it runs keyring kr.
func KeyringStatement(id, kr string) []byte { return []byte(id + "\x00" + kr) }

// RevokedStatement is what a member signs to say its Nebula blocks what
// revocation list version v revokes.
func RevokedStatement(id string, v int) []byte { return []byte(fmt.Sprintf("%s\x00%d", id, v)) }

// CAStatement is what a member signs to say it runs CA report rep
// (CAReport); the node id is its nonce, as nobody asks.
func CAStatement(rep string) []byte { return []byte(rep) }

// queryNonceSize is the length of the fresh nonce a query carries for
// the answers' signatures (keyring and revocation queries).
const queryNonceSize = 16

// newQueryNonce is a fresh nonce for one query: a signed answer to it
// cannot be replayed to another.
func newQueryNonce() []byte {
	n := make([]byte, queryNonceSize)
	_, _ = rand.Read(n)
	return n
}

// reachBound bounds one direct probe of a member's overlay address.
const reachBound = 2 * time.Second

// reachCache probes members' overlay addresses (Hooks.Reach) in the
// background, at most once each per cache: a waiter asks on every poll
// and gets "not known yet" until the probe ends.
type reachCache struct {
	reach func(ctx context.Context, addr netip.Addr) error
	log   *slog.Logger
	ctx   context.Context
	mu    sync.Mutex
	state map[netip.Addr]reachState
	wg    sync.WaitGroup
}

type reachState int

const (
	reachPending reachState = iota // probe in flight
	reachUp                        // answered through the overlay
	reachDown                      // no answer within reachBound
)

func newReachCache(ctx context.Context, reach func(context.Context, netip.Addr) error, log *slog.Logger) *reachCache {
	return &reachCache{reach: reach, ctx: ctx, log: log, state: map[netip.Addr]reachState{}}
}

// get is addr's probe state, starting its probe on the first ask.
func (c *reachCache) get(addr netip.Addr) reachState {
	c.mu.Lock()
	defer c.mu.Unlock()
	if st, ok := c.state[addr]; ok {
		return st
	}
	c.state[addr] = reachPending
	c.wg.Go(func() {
		ctx, cancel := context.WithTimeout(c.ctx, reachBound)
		defer cancel()
		start := time.Now()
		st := reachDown
		err := c.reach(ctx, addr)
		if err == nil {
			st = reachUp
		}
		c.log.Debug("direct probe of a member's overlay address", "addr", addr, "up", st == reachUp,
			"took", time.Since(start).Round(time.Millisecond), "err", err)
		c.mu.Lock()
		c.state[addr] = st
		c.mu.Unlock()
	})
	return reachPending
}

// wait waits for the probes in flight (they end within reachBound).
func (c *reachCache) wait() { c.wg.Wait() }
