package agenttest_test

import (
	"net"
	"testing"
	"time"

	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/pki"
)

// enrollDirect enrolls as a joiner at ip would, with the given TLS CSR and
// Nebula public key, but without a meshd behind it: for tests that need the
// cluster to record a node whose agent never runs or never hears the answer.
func enrollDirect(t *testing.T, tok enroll.Token, ip string, csr, nebulaPub []byte, ports enroll.Ports) (*enroll.Response, error) {
	t.Helper()
	dialer := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return enroll.Enroll(t.Context(), tok, enroll.Request{
		Protocol: enroll.ProtocolVersion, Secret: tok.Secret, Name: tok.Name, CSR: csr,
		NebulaPublic: nebulaPub, Underlay: ip, Version: "test", Clock: time.Now(), Ports: ports,
	}, enroll.ClientDeps{Dial: dialer.DialContext})
}

// mustKeys generates a joiner's keys for name.
func mustKeys(t *testing.T, name string) *pki.Keys {
	t.Helper()
	k, err := pki.NewKeys(name)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
