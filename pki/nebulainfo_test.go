package pki_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/slackhq/nebula/cert"

	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

func TestNebulaCertInfoAndValidity(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	id := pkitest.NewIdentity(t, ca, "n1", pki.RoleWorker, pkitest.IP(5))
	c, _, err := cert.UnmarshalCertificateFromPEM(id.NebulaCert)
	if err != nil {
		t.Fatal(err)
	}
	wantFP, err := c.Fingerprint()
	if err != nil {
		t.Fatal(err)
	}
	wantNB, wantNA := pkitest.Now.Add(-pki.LeafBackdate), pkitest.Now.Add(pki.DefaultNebulaLifetime)

	fp, expires, err := pki.NebulaCertInfo(id.NebulaCert)
	if err != nil || fp == "" || fp != wantFP || !expires.Equal(wantNA) {
		t.Errorf("NebulaCertInfo = %q, %v, %v; want %q, %v", fp, expires, err, wantFP, wantNA)
	}
	nb, na, err := pki.NebulaCertValidity(id.NebulaCert)
	if err != nil || !nb.Equal(wantNB) || !na.Equal(wantNA) {
		t.Errorf("NebulaCertValidity = %v, %v, %v; want %v, %v", nb, na, err, wantNB, wantNA)
	}

	for _, garbage := range [][]byte{nil, []byte("junk"), id.Cert} {
		if fp, _, err := pki.NebulaCertInfo(garbage); err == nil {
			t.Errorf("NebulaCertInfo(%.20q) = %q, want an error", garbage, fp)
		}
		if _, _, err := pki.NebulaCertValidity(garbage); err == nil {
			t.Errorf("NebulaCertValidity(%.20q) succeeded, want an error", garbage)
		}
	}
}

func TestCheckNebulaCert(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	other := pkitest.NewCA(t, "prod")
	id := pkitest.NewIdentity(t, ca, "n1", pki.RoleWorker, pkitest.IP(5))
	id2 := pkitest.NewIdentity(t, ca, "n2", pki.RoleWorker, pkitest.IP(6))
	foreign := pkitest.NewIdentity(t, other, "n1", pki.RoleWorker, pkitest.IP(5))
	ip := pkitest.IP(5).Addr()
	_, notAfter, err := pki.NebulaCertValidity(id.NebulaCert)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		caPEM   []byte
		certPEM []byte
		keyPEM  []byte
		ip      netip.Addr
		now     time.Time
		wantErr bool
	}{
		{name: "ok/own-cert", caPEM: id.NebulaCACert, certPEM: id.NebulaCert, keyPEM: id.NebulaKey, ip: ip},
		{name: "fail/bad-ca-pem", caPEM: []byte("junk"), certPEM: id.NebulaCert, keyPEM: id.NebulaKey, ip: ip, wantErr: true},
		{name: "fail/bad-cert-pem", caPEM: id.NebulaCACert, certPEM: []byte("junk"), keyPEM: id.NebulaKey, ip: ip, wantErr: true},
		{name: "fail/other-ca", caPEM: id.NebulaCACert, certPEM: foreign.NebulaCert, keyPEM: foreign.NebulaKey, ip: ip, wantErr: true},
		{name: "fail/expired", caPEM: id.NebulaCACert, certPEM: id.NebulaCert, keyPEM: id.NebulaKey, ip: ip, now: notAfter.Add(time.Second), wantErr: true},
		{name: "fail/bad-key-pem", caPEM: id.NebulaCACert, certPEM: id.NebulaCert, keyPEM: []byte("junk"), ip: ip, wantErr: true},
		{name: "fail/key-of-other-node", caPEM: id.NebulaCACert, certPEM: id.NebulaCert, keyPEM: id2.NebulaKey, ip: ip, wantErr: true},
		{name: "fail/other-ip", caPEM: id.NebulaCACert, certPEM: id.NebulaCert, keyPEM: id.NebulaKey, ip: pkitest.IP(6).Addr(), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := tt.now
			if now.IsZero() {
				now = pkitest.Now
			}
			err := pki.CheckNebulaCert(tt.caPEM, tt.certPEM, tt.keyPEM, tt.ip, now)
			if (err != nil) != tt.wantErr {
				t.Fatalf("CheckNebulaCert = %v, want error: %v", err, tt.wantErr)
			}
		})
	}
}
