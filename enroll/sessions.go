package enroll

import (
	"crypto/tls"
	"strings"
)

// A joiner's TLS sessions with seeds (issue 54 item 4): a join probes
// its seeds, checks the token and enrolls, a connection each, most often
// to the same seed; with a session cache shared by them (ClientDeps.
// Sessions) all but the first resume, which spares the seed a full
// handshake's signature and certificate check.
//
// A resumed connection is held to everything a full one is:
// VerifyConnection (the token's CA pins, the seed's role and the node
// the token names at that address) runs on it too, against the leaf the
// session carries. Sessions are keyed by the token's pins as well as the
// seed, so a session made under one CA is never offered under another
// (during a CA rotation a seed presents the leaf of the CA the joiner
// names): that one would be refused, and a refusal is final.

// sessionsSize bounds a joiner's cached sessions: one per seed.
const sessionsSize = 16

// NewSessions is a bounded session cache for ClientDeps.Sessions.
func NewSessions() tls.ClientSessionCache { return tls.NewLRUClientSessionCache(sessionsSize) }

// pinnedSessions is a cache whose keys carry the token's pins.
type pinnedSessions struct {
	c    tls.ClientSessionCache
	pins string
}

func newPinnedSessions(c tls.ClientSessionCache, tok Token) pinnedSessions {
	var b strings.Builder
	for _, p := range tok.Pins() {
		b.WriteString("|")
		b.WriteString(p.String())
	}
	return pinnedSessions{c: c, pins: b.String()}
}

func (s pinnedSessions) Get(seed string) (*tls.ClientSessionState, bool) {
	return s.c.Get(seed + s.pins)
}

func (s pinnedSessions) Put(seed string, cs *tls.ClientSessionState) { s.c.Put(seed+s.pins, cs) }
