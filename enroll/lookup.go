package enroll

import "context"

// LookupToken is Ledger.Token for a node whose copy of the ledger may lag
// behind the leader's (a raft follower): local reads this node's copy, and
// sync brings it up to date (a read index: a round trip to the leader).
//
// A token found locally is answered without a round trip. That is safe:
// a token record, once minted, only gains a consumption or revocation or
// goes away, each of which the admission's compare-and-set in raft checks
// on the current state, so a stale "unused" costs at most the work up to
// Admit, never a second admission. Only a token not found locally (minted
// a moment ago on another node, or never) costs a sync, after which the
// local copy is asked again. Bad tokens are mostly unknown ones, so this
// does not stop them costing a round trip each; the server's throttle
// bounds how many a source can send.
func LookupToken(ctx context.Context, h TokenHash, local func(TokenHash) (TokenRecord, bool),
	sync func(context.Context) error,
) (TokenRecord, bool, error) {
	if rec, ok := local(h); ok {
		return rec, true, nil
	}
	if err := sync(ctx); err != nil {
		return TokenRecord{}, false, err
	}
	rec, ok := local(h)
	return rec, ok, nil
}
