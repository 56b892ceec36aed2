package control

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"

	"github.com/meshd/meshd/pki"
)

// TLS session resumption (issue 54 item 4): on a control node the
// server's side of a full mTLS handshake was the largest single CPU item
// (16%), one per new internal-API, enroll or watch connection. A client
// keeps the session tickets control nodes send (one cache per client,
// bounded) and offers one on its next connection to the same control
// node, which then skips both certificate signatures and their checks.
//
// What a resumed connection is still held to:
//   - on the server, crypto/tls refuses to resume a session whose client
//     leaf has expired or no longer chains to the CA bundle of that moment
//     (it re-verifies the chain); the guard judges the leaf the session
//     carries at every request, as for any connection: a node removed,
//     revoked or renewed past that leaf is refused NotMember
//     (TestResumedSessionStillJudged). Port 7300 checks nothing in
//     VerifyPeerCertificate, which a resumption skips.
//   - on the client, VerifyConnection runs on a resumed connection too
//     (the CA and role check of pki.ClientTLSConfig, then the client's
//     ServerCheck) against the server leaf the session carries.
//
// Sessions are keyed by this node's own leaf as well as the server: a
// renewed leaf never resumes a session made with the one before (the
// server would see the old leaf). They are keyed by this node's CA bundle
// too: once a CA rotation changes the bundle (the next CA added, the old
// one dropped at its finish), no session made before is offered, since
// its server leaf may be under a CA the bundle no longer holds and the
// client would refuse it: the first request after a rotation finished
// failed so (e2e.TestMoveToV2, `meshctl nodes` X503104SEEDUN) before the
// next connection's full handshake (TestSessionsFollowTheBundle). A resumed connection whose server leaf
// this client refuses fails that once: crypto/tls drops a session whose
// resumption failed, so the next connection makes a full handshake and
// is judged on the leaf the server presents by then
// (TestResumedSessionServerChecked).

// sessionCacheSize bounds a client's cached sessions: one per control
// node it talks to (crypto/tls keeps the newest ticket per server).
const sessionCacheSize = 64

// sessionCache is a bounded LRU of sessions keyed by server and this
// node's current leaf. A session whose handshake a leaf renewal
// overtook is kept under the new leaf; resumed, it presents the
// previous leaf, which the guard still accepts (holdsLeaf).
type sessionCache struct {
	lru  tls.ClientSessionCache
	live *pki.LiveIdentity
}

func newSessionCache(l *pki.LiveIdentity) *sessionCache {
	return &sessionCache{lru: tls.NewLRUClientSessionCache(sessionCacheSize), live: l}
}

func (s *sessionCache) key(server string) string {
	bundle := sha256.Sum256(s.live.Identity().CACert)
	return server + "|" + pki.FingerprintOf(s.live.Leaf()).String() + "|" + hex.EncodeToString(bundle[:8])
}

func (s *sessionCache) Get(server string) (*tls.ClientSessionState, bool) {
	return s.lru.Get(s.key(server))
}

func (s *sessionCache) Put(server string, cs *tls.ClientSessionState) { s.lru.Put(s.key(server), cs) }
