package main

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/slackhq/nebula/cert"
)

// genCerts writes a fresh CA (ca.crt) and, for each name=ip/prefix in
// nodes, NAME.crt and NAME.key into dir: version 2 certificates on
// Curve25519, like meshd's, valid for a day.
func genCerts(dir, nodes string) error {
	if nodes == "" {
		return fmt.Errorf("-gencerts needs -nodes")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	caPub, caKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Minute).Truncate(time.Second)
	caTBS := &cert.TBSCertificate{
		Version: cert.Version2, Name: "baseline-ca", IsCA: true,
		NotBefore: now, NotAfter: now.Add(24 * time.Hour),
		PublicKey: caPub, Curve: cert.Curve_CURVE25519,
	}
	ca, err := caTBS.Sign(nil, cert.Curve_CURVE25519, caKey)
	if err != nil {
		return fmt.Errorf("sign CA: %w", err)
	}
	if err := writePEM(dir, "ca.crt", ca); err != nil {
		return err
	}
	for _, spec := range strings.Split(nodes, ",") {
		name, ip, ok := strings.Cut(spec, "=")
		if !ok {
			return fmt.Errorf("node %q: want name=ip/prefix", spec)
		}
		network, err := netip.ParsePrefix(ip)
		if err != nil {
			return fmt.Errorf("node %q: %w", spec, err)
		}
		key, err := ecdh.X25519().GenerateKey(rand.Reader)
		if err != nil {
			return err
		}
		tbs := &cert.TBSCertificate{
			Version: cert.Version2, Name: name, Networks: []netip.Prefix{network},
			NotBefore: now, NotAfter: now.Add(23 * time.Hour),
			PublicKey: key.PublicKey().Bytes(), Curve: cert.Curve_CURVE25519,
		}
		c, err := tbs.Sign(ca, cert.Curve_CURVE25519, caKey)
		if err != nil {
			return fmt.Errorf("sign %s: %w", name, err)
		}
		if err := writePEM(dir, name+".crt", c); err != nil {
			return err
		}
		keyPEM := cert.MarshalPrivateKeyToPEM(cert.Curve_CURVE25519, key.Bytes())
		if err := os.WriteFile(filepath.Join(dir, name+".key"), keyPEM, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func writePEM(dir, file string, c cert.Certificate) error {
	b, err := c.MarshalPEM()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, file), b, 0o600)
}
