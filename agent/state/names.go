package state

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meshd/meshd/enroll"
)

// One rule for a name (issue 52 item 4, DESIGN §12): a name is held by a
// record that is not former, by a live one-time token minted for it
// (unused, unrevoked, unexpired), or by a live reusable key whose prefix
// could give it (prefix, then a number: web-3 for key web-). Every
// admission path asks nameHolder: a one-time token (a meshd member's or
// a stock Nebula member's), a key (its name from the joiner's host or
// its prefix), a JWT's name claim; and a mint of a one-time token asks it
// too, so `admit db1` while another token for db1 is live, or `admit
// web-3` while key web- is live, is refused at once. A key's joiner never
// takes a held name: it gets the next free one. The rule applies to
// entries that say so (MintToken.Names, Admit.Names: every writer since
// issue 52); an entry written before applies as it did, so a log replays
// to the state it made.

// NameHolder is who holds a name under the one name rule.
type NameHolder struct {
	Node  string           // the node id of a record that is not former
	State NodeState        // that record's state
	Token enroll.TokenHash // a live token or key
	Key   string           // the key's prefix, for a key
	Until time.Time        // the token's or key's expiry
}

func (h NameHolder) String() string {
	switch {
	case h.Node != "":
		return fmt.Sprintf("node %s (%s)", h.Node, h.State)
	case h.Key != "":
		return fmt.Sprintf("reusable key %s (prefix %s, live until %s)", shortHash(h.Token), h.Key, h.Until.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("unused token %s (live until %s)", shortHash(h.Token), h.Until.UTC().Format(time.RFC3339))
}

// nameHolder reports who holds name at at, the token or key except aside
// (the one admitting, or being minted). A token minted for a name before
// a key whose prefix gives it keeps the name: the key's joiners skip it,
// and the key does not hold it against the token's own admission.
func (s *Snapshot) nameHolder(name string, at time.Time, except enroll.TokenHash) (NameHolder, bool) {
	if n, ok := s.nodeByName(name); ok {
		return NameHolder{Node: n.ID, State: n.State}, true
	}
	self, own := s.Tokens[except]
	own = own && !self.IsKey() && self.Name == name
	var found []NameHolder
	for h, r := range s.Tokens {
		if h == except || r.Consumed() || r.Revoked() || !at.Before(r.Expires) || r.Renew {
			continue
		}
		switch {
		case r.IsKey() && !r.Exhausted() && KeyGives(r.Key.NamePrefix, name) && (!own || r.Created.Before(self.Created)):
			found = append(found, NameHolder{Token: h, Key: r.Key.NamePrefix, Until: r.Expires})
		case !r.IsKey() && r.Name == name:
			found = append(found, NameHolder{Token: h, Until: r.Expires})
		}
	}
	if len(found) == 0 {
		return NameHolder{}, false
	}
	// Deterministic whatever the map's order: the first by hash.
	return slices.MinFunc(found, func(a, b NameHolder) int { return cmp.Compare(a.Token.String(), b.Token.String()) }), true
}

// KeyGives reports whether a key of prefix could give name: the prefix,
// then a whole number from 1 written as enroll.KeyName writes it.
func KeyGives(prefix, name string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok || rest == "" || rest[0] == '0' {
		return false
	}
	n, err := strconv.Atoi(rest)
	return err == nil && n > 0 && strconv.Itoa(n) == rest
}

// NameHolder reports who holds name now (the one name rule): for `admit`,
// which refuses a held name before it mints.
func (f *FSM) NameHolder(name string, at time.Time) (NameHolder, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.nameHolder(name, at, enroll.TokenHash{})
}
