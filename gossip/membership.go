package gossip

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/meshd/meshd/codes"
)

// Join contacts the given peers ("host:port" each) and merges state with
// every one that answers; it returns how many did. Joining one member joins
// the whole cluster. serf's calls take no context, so when ctx ends first
// Join returns at once while the attempt finishes in the background (bounded
// by memberlist's TCP timeout, and waited for by Shutdown); if it then
// succeeds, this node is a member after all.
//
// With nobody joined the error carries codes.GossipJoin, or codes.GossipKey
// when a peer was reached but the gossip keys differ: the peer answered with
// a message no installed key could decrypt, refused ours as undecryptable,
// or closed the connection on our encrypted state.
func (g *Gossip) Join(ctx context.Context, addrs []string) (int, error) {
	if len(addrs) == 0 {
		return 0, codes.Wrap(codes.GossipJoin, errors.New("gossip join: no peer addresses given"))
	}
	addrs = slices.Clone(addrs)
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	// ignoreOld: meshd sends no user events, and old ones must not replay.
	if !g.spawn(func() {
		n, err := g.serf.Join(addrs, true)
		done <- result{n, err}
	}) {
		return 0, codes.Wrap(codes.GossipJoin, fmt.Errorf("gossip join: %w", errShutdown))
	}
	select {
	case r := <-done:
		if r.n == 0 {
			return 0, joinError(addrs, r.err)
		}
		if r.err != nil { // memberlist joined, but serf could not queue its join intent
			return r.n, fmt.Errorf("gossip join: announce the join: %w", r.err)
		}
		g.log.Info("gossip joined", "peers", r.n, "of", len(addrs))
		return r.n, nil
	case <-ctx.Done():
		return 0, codes.Wrap(codes.GossipJoin, fmt.Errorf("gossip join %s: %w", strings.Join(addrs, ", "), context.Cause(ctx)))
	}
}

// Leave departs gracefully: it broadcasts the leave intent, waits for it to
// go out and then for it to propagate (serf's LeavePropagateDelay: 1s, or
// 200ms with Fast), so peers see EventLeave rather than EventFailed. It does
// not stop serf; call Shutdown afterwards. When ctx ends first Leave returns
// ctx's error and the leave completes in the background; Shutdown waits
// for it (at most serf's BroadcastTimeout twice plus the propagation delay).
func (g *Gossip) Leave(ctx context.Context) error {
	done := make(chan error, 1)
	if !g.spawnLeave(func() { done <- g.serf.Leave() }) {
		return fmt.Errorf("gossip leave: %w", errShutdown)
	}
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("gossip leave: %w", err)
		}
		g.log.Info("gossip left", "name", g.name)
		return nil
	case <-ctx.Done():
		return fmt.Errorf("gossip leave: %w", context.Cause(ctx))
	}
}

// peerErrors are the per-address failures of a join, shown on one line.
type peerErrors []error

func (p peerErrors) Error() string {
	parts := make([]string, len(p))
	for i, e := range p {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

func (p peerErrors) Unwrap() []error { return p }

// splitErrors flattens memberlist's multierror (matched by its method, so
// this package needs no import of it) into one error per address.
func splitErrors(err error) peerErrors {
	var multi interface{ WrappedErrors() []error }
	if errors.As(err, &multi) {
		if errs := multi.WrappedErrors(); len(errs) > 0 {
			return peerErrors(errs)
		}
	}
	return peerErrors{err}
}

// joinError codes a join that reached nobody: codes.GossipKey if any peer
// failed in a way that means the keys differ, else codes.GossipJoin.
func joinError(addrs []string, err error) error {
	if err == nil {
		err = errors.New("no peer answered")
	}
	errs := splitErrors(err)
	peers := strings.Join(addrs, ", ")
	if slices.ContainsFunc(errs, isKeyMismatch) {
		return codes.Wrap(codes.GossipKey, fmt.Errorf(
			"gossip join %s: gossip key mismatch: this node's key is not the cluster's (%w)", peers, errs))
	}
	return codes.Wrap(codes.GossipJoin, fmt.Errorf("gossip join %s: no peer joined: %w", peers, errs))
}

// isKeyMismatch reports whether one peer's join failure means the keys
// differ. memberlist reports it in three ways: we could not decrypt the
// peer's answer (it encrypts its error reply with its own key); the peer
// reports it could not decrypt ours ("remote error: ..."); or the peer
// closed the connection right after we sent our encrypted state (EOF).
func isKeyMismatch(err error) bool {
	msg := strings.ToLower(err.Error())
	for _, m := range []string{
		"no installed keys could decrypt",
		"decrypt",
		"not encrypted",
		"encryption is not configured",
	} {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return strings.HasSuffix(msg, ": eof") || strings.Contains(msg, "unexpected eof")
}

// ForceLeave tells the cluster that name has left for good (a removed
// node): serf marks it left and reaps it later, so it is no longer gossiped
// about as failed. (Not the prune variant: serf sleeps out its broadcast
// timeout while holding the member lock there, stalling Members for 5 s.)
func (g *Gossip) ForceLeave(name string) error {
	if g.isClosed() {
		return errors.New("gossip: shut down")
	}
	return g.serf.RemoveFailedNode(name)
}

// Notify gossips a payload-free notification called name to every member;
// each receives an EventUser (serf coalesces bursts of the same name). It
// tells others to look something up (meshd: "the revocations changed"),
// never what to trust.
func (g *Gossip) Notify(name string) error {
	if g.isClosed() {
		return errors.New("gossip: shut down")
	}
	return g.serf.UserEvent(name, nil, true)
}
