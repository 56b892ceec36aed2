package pki

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshd/meshd/codes"
)

// LiveIdentity is a node's identity as its listeners and clients present
// it right now. Swap replaces it; TLS configs made by LiveServerTLSConfig
// and LiveClientTLSConfig pick the new leaf up at their next handshake,
// so a renewed leaf is adopted without restarting anything. Connections
// already open keep the leaf they were made with.
type LiveIdentity struct {
	mu   sync.RWMutex
	id   *Identity
	cert tls.Certificate // id's leaf and key, chain leaf, CA
	leaf *x509.Certificate
	pool *x509.CertPool // id's CA bundle: every handshake verifies peers against it
	// held are earlier leaves of the same key under another CA of the
	// bundle, by that CA's fingerprint (a CA rotation reissued the leaf):
	// served to a joiner whose token pins that CA (PinProto). Each
	// is dropped when its CA leaves the bundle.
	held map[Fingerprint]tls.Certificate
}

// NewLiveIdentity starts with id, whose leaf must match its key.
func NewLiveIdentity(id *Identity) (*LiveIdentity, error) {
	l := &LiveIdentity{}
	if err := l.Swap(id); err != nil {
		return nil, err
	}
	return l, nil
}

// Swap makes id the current identity. id's leaf must match its key; the
// caller has checked the rest (CheckRenewedLeaf).
func (l *LiveIdentity) Swap(id *Identity) error {
	tc, err := id.TLSCertificate()
	if err != nil {
		return err
	}
	leaf, err := id.Leaf()
	if err != nil {
		return err
	}
	pool, err := id.CAPool()
	if err != nil {
		return err
	}
	cas, err := BundleCerts(id.CACert)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	held := map[Fingerprint]tls.Certificate{}
	inBundle := func(fp Fingerprint) bool {
		return slices.ContainsFunc(cas, func(c *x509.Certificate) bool { return FingerprintOf(c) == fp })
	}
	for fp, c := range l.held {
		if inBundle(fp) {
			held[fp] = c
		}
	}
	if l.leaf != nil && l.id != nil {
		if was := IssuerIn(l.id.CACert, l.leaf); was != nil {
			fp := FingerprintOf(was)
			is := IssuerIn(id.CACert, leaf)
			if (is == nil || FingerprintOf(is) != fp) && inBundle(fp) && bytes.Equal(l.id.Key, id.Key) {
				held[fp] = l.cert
			}
		}
	}
	if ca := IssuerIn(id.CACert, leaf); ca != nil {
		delete(held, FingerprintOf(ca))
	}
	l.id, l.cert, l.leaf, l.pool, l.held = id, tc, leaf, pool, held
	return nil
}

// Pool is the CA bundle peers are verified against now.
func (l *LiveIdentity) Pool() *x509.CertPool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.pool
}

// certificateFor is the leaf to present to a client that offered the
// ALPN protocols protos: the held leaf under the CA a PinProto names,
// else the current one.
func (l *LiveIdentity) certificateFor(protos []string) *tls.Certificate {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if prefix, ok := pinFromProtos(protos); ok {
		for fp, c := range l.held {
			if strings.HasPrefix(fp.String(), prefix) {
				return &c
			}
		}
	}
	tc := l.cert
	return &tc
}

// Identity is the current identity. Callers must not modify it; copy it
// and Swap the copy in.
func (l *LiveIdentity) Identity() *Identity {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.id
}

// Leaf is the current TLS leaf, parsed.
func (l *LiveIdentity) Leaf() *x509.Certificate {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.leaf
}

func (l *LiveIdentity) certificate() *tls.Certificate {
	l.mu.RLock()
	defer l.mu.RUnlock()
	tc := l.cert
	return &tc
}

// LiveServerTLSConfig is ServerTLSConfig presenting l's current leaf at
// each handshake and verifying clients against l's CA bundle of that
// moment, so a renewed leaf and a changed bundle (a CA rotation) take
// effect without a restart. A client that names a CA in its ALPN offer
// (PinProto) gets the leaf l holds under that CA, if any.
func LiveServerTLSConfig(l *LiveIdentity, clientRoles ...Role) (*tls.Config, error) {
	cfg, err := ServerTLSConfig(l.Identity(), clientRoles...)
	if err != nil {
		return nil, err
	}
	cfg.Certificates = nil
	cfg.GetCertificate = func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		return l.certificateFor(h.SupportedProtos), nil
	}
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		c := cfg.Clone() // with whatever the caller set on cfg since
		c.GetConfigForClient = nil
		c.ClientCAs = l.Pool()
		return c, nil
	}
	return cfg, nil
}

// LiveClientTLSConfig is ClientTLSConfig presenting l's current leaf at
// each handshake.
func LiveClientTLSConfig(l *LiveIdentity, serverRole Role) (*tls.Config, error) {
	cfg, err := clientTLSConfig(l.Identity(), serverRole, l.Pool)
	if err != nil {
		return nil, err
	}
	cfg.Certificates = nil
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return l.certificate(), nil }
	return cfg, nil
}

// CheckRenewedLeaf decides whether a node adopts next (PEM) in place of
// its current identity id: next must certify id's own private key, verify
// against id's cluster CA at now for the usages id's leaf has, carry the
// same name, node id and role, and expire later than the current leaf.
// Anything else is codes.CertRefused: the node keeps its leaf.
func CheckRenewedLeaf(id *Identity, next []byte, now time.Time) (*x509.Certificate, error) {
	refuse := func(err error) (*x509.Certificate, error) {
		return nil, codes.Wrap(codes.CertRefused, fmt.Errorf("renewed TLS leaf: %w", err))
	}
	cur, err := id.Leaf()
	if err != nil {
		return refuse(err)
	}
	if _, err := tls.X509KeyPair(next, id.Key); err != nil {
		return refuse(errors.New("it does not certify this node's private key"))
	}
	leaf, err := ParseCertPEM(next)
	if err != nil {
		return refuse(err)
	}
	pool, err := id.CAPool()
	if err != nil {
		return refuse(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: cur.ExtKeyUsage}); err != nil {
		return refuse(fmt.Errorf("it does not verify against the cluster CA: %w", err))
	}
	curRole, _ := RoleOf(cur)
	role, err := RoleOf(leaf)
	switch {
	case err != nil || role != curRole:
		return refuse(fmt.Errorf("role %q, this node is %q", role, curRole))
	case leaf.Subject.CommonName != cur.Subject.CommonName || NodeIDOf(leaf) != NodeIDOf(cur):
		return refuse(fmt.Errorf("it names %s (%s), this node is %s (%s)", leaf.Subject.CommonName, NodeIDOf(leaf),
			cur.Subject.CommonName, NodeIDOf(cur)))
	case !slices.Equal(leaf.ExtKeyUsage, cur.ExtKeyUsage):
		return refuse(errors.New("its key usages differ from the current leaf's"))
	case !leaf.NotAfter.After(cur.NotAfter):
		return refuse(fmt.Errorf("it expires %s, no later than the current leaf", leaf.NotAfter.Format(time.RFC3339)))
	}
	return leaf, nil
}

// PublicKeyDER is the PKIX DER of the public key certPEM's first
// certificate certifies: what raft records as a node's TLS key.
func PublicKeyDER(certPEM []byte) ([]byte, error) {
	c, err := ParseCertPEM(certPEM)
	if err != nil {
		return nil, err
	}
	return x509.MarshalPKIXPublicKey(c.PublicKey)
}

// SaveTLSLeaf replaces only the TLS leaf of the identity saved under dir
// (tls/node.crt, same mode as Save writes), atomically: a crash leaves the
// old leaf or the new one, and the key and the marker are untouched.
func SaveTLSLeaf(dir string, certPEM []byte) error {
	return WriteFileAtomic(filepath.Join(dir, tlsDir, "node.crt"), certPEM, 0o644)
}
