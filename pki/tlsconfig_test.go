package pki_test

import (
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/pki/pkitest"
)

// handshake runs a TLS handshake over net.Pipe and has the server send one
// byte (both configs judge certificates at pkitest.Now unless their Time is
// set), so that a client certificate the server rejects after the client's
// side of a TLS 1.3 handshake is done still fails the client.
func handshake(t *testing.T, srvCfg, cliCfg *tls.Config) (srvErr, cliErr error, srvState tls.ConnectionState) {
	t.Helper()
	for _, cfg := range []*tls.Config{srvCfg, cliCfg} {
		if cfg.Time == nil {
			cfg.Time = pkitest.Clock()
		}
	}
	c1, c2 := net.Pipe()
	var wg sync.WaitGroup
	wg.Go(func() {
		defer c1.Close() // not s.Close: a close_notify would block on the pipe
		s := tls.Server(c1, srvCfg)
		if srvErr = s.Handshake(); srvErr == nil {
			srvState = s.ConnectionState()
			_, srvErr = s.Write([]byte{1})
		}
	})
	c := tls.Client(c2, cliCfg)
	if cliErr = c.Handshake(); cliErr == nil {
		_, cliErr = c.Read(make([]byte, 1))
	}
	c2.Close()
	wg.Wait()
	return srvErr, cliErr, srvState
}

func TestMutualTLS(t *testing.T) {
	ca := pkitest.NewCA(t, "prod")
	other := pkitest.NewCA(t, "prod")
	control := pkitest.NewIdentity(t, ca, "c1", pki.RoleControl, pkitest.IP(1))
	control2 := pkitest.NewIdentity(t, ca, "c2", pki.RoleControl, pkitest.IP(2))
	worker := pkitest.NewIdentity(t, ca, "w1", pki.RoleWorker, pkitest.IP(3))
	foreign := pkitest.NewIdentity(t, other, "c3", pki.RoleControl, pkitest.IP(4))

	must := func(cfg *tls.Config, err error) *tls.Config {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	anonymous := func() *tls.Config { return &tls.Config{InsecureSkipVerify: true} }

	tests := []struct {
		name       string
		server     *tls.Config
		client     *tls.Config
		wantOK     bool
		wantSrvErr codes.Code // checked when set
		wantPeer   string     // server's view of the client, when set
	}{
		{
			name:     "ok/control-client-control-only-server",
			server:   must(pki.ServerTLSConfig(control, pki.RoleControl)),
			client:   must(pki.ClientTLSConfig(control2, pki.RoleControl)),
			wantOK:   true,
			wantPeer: "c2",
		},
		{
			name:     "ok/worker-client-any-role-server",
			server:   must(pki.ServerTLSConfig(control, pki.RoleControl, pki.RoleWorker)),
			client:   must(pki.ClientTLSConfig(worker, pki.RoleControl)),
			wantOK:   true,
			wantPeer: "w1",
		},
		{
			name:   "ok/anonymous-client-optional-cert-server",
			server: must(pki.ServerTLSConfig(control)),
			client: anonymous(),
			wantOK: true,
		},
		{
			name:       "fail/worker-client-control-only-server",
			server:     must(pki.ServerTLSConfig(control, pki.RoleControl)),
			client:     must(pki.ClientTLSConfig(worker, pki.RoleControl)),
			wantSrvErr: codes.PeerRoleDenied,
		},
		{
			name:   "fail/foreign-ca-client",
			server: must(pki.ServerTLSConfig(control, pki.RoleControl)),
			client: must(pki.ClientTLSConfig(foreign, pki.RoleControl)),
		},
		{
			name:   "fail/foreign-ca-client-optional-cert-server",
			server: must(pki.ServerTLSConfig(control)),
			client: must(pki.ClientTLSConfig(foreign, pki.RoleControl)),
		},
		{
			name:   "fail/anonymous-client-control-only-server",
			server: must(pki.ServerTLSConfig(control, pki.RoleControl)),
			client: anonymous(),
		},
		{
			name:   "fail/worker-leaf-as-server",
			server: must(pki.ServerTLSConfig(worker)),
			client: must(pki.ClientTLSConfig(control, pki.RoleControl)),
		},
		{
			name:   "fail/foreign-ca-server",
			server: must(pki.ServerTLSConfig(foreign)),
			client: must(pki.ClientTLSConfig(control, pki.RoleControl)),
		},
		{
			name:   "fail/server-role-not-wanted",
			server: must(pki.ServerTLSConfig(control)),
			client: must(pki.ClientTLSConfig(control2, pki.RoleWorker)),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srvErr, cliErr, st := handshake(t, tt.server, tt.client)
			if tt.wantOK {
				if srvErr != nil || cliErr != nil {
					t.Fatalf("handshake failed: server %v, client %v", srvErr, cliErr)
				}
				if tt.wantPeer != "" {
					role, id, name, ok := pki.PeerIdentity(st)
					if !ok || name != tt.wantPeer || id != "id-"+tt.wantPeer || role == "" {
						t.Errorf("PeerIdentity = %q %q %q %v, want %s", role, id, name, ok, tt.wantPeer)
					}
				}
				return
			}
			if srvErr == nil || cliErr == nil {
				t.Fatalf("handshake should fail on both ends: server %v, client %v", srvErr, cliErr)
			}
			if tt.wantSrvErr != "" && codes.Of(srvErr) != tt.wantSrvErr {
				t.Errorf("server error %v, want code %s", srvErr, tt.wantSrvErr)
			}
		})
	}
}

func TestPeerIdentityNoCert(t *testing.T) {
	if _, _, _, ok := pki.PeerIdentity(tls.ConnectionState{}); ok {
		t.Error("PeerIdentity ok without a peer certificate")
	}
}

// tlsIdentity issues the TLS half of an identity at the instant at.
func tlsIdentity(t *testing.T, ca *pki.CA, name string, role pki.Role, at time.Time) *pki.Identity {
	t.Helper()
	keys, err := pki.NewKeys(name)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.SignTLS(pki.LeafRequest{CSR: keys.CSR, Name: name, NodeID: "id-" + name, Role: role, Lifetime: time.Hour}, at)
	if err != nil {
		t.Fatal(err)
	}
	return &pki.Identity{CACert: ca.CertPEM(), Cert: leaf, Key: keys.TLSKeyPEM}
}

// TestTLSConfigJudgesAtConfigTime uses certificates that were valid for an
// hour in 2001, so only a config whose Time says 2001 can accept them.
func TestTLSConfigJudgesAtConfigTime(t *testing.T) {
	past := time.Date(2001, 5, 1, 12, 0, 0, 0, time.UTC)
	ca, err := pki.NewCA("old", pkitest.Overlay, past)
	if err != nil {
		t.Fatal(err)
	}
	control := tlsIdentity(t, ca, "c1", pki.RoleControl, past)
	worker := tlsIdentity(t, ca, "w1", pki.RoleWorker, past)
	tests := []struct {
		name   string
		at     time.Time
		wantOK bool
	}{
		{name: "ok/inside-validity", at: past.Add(30 * time.Minute), wantOK: true},
		{name: "fail/after-expiry", at: past.Add(2 * time.Hour)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, err := pki.ServerTLSConfig(control, pki.RoleWorker)
			if err != nil {
				t.Fatal(err)
			}
			cli, err := pki.ClientTLSConfig(worker, pki.RoleControl)
			if err != nil {
				t.Fatal(err)
			}
			clock := func() time.Time { return tt.at }
			srv.Time, cli.Time = clock, clock
			srvErr, cliErr, _ := handshake(t, srv, cli)
			if ok := srvErr == nil && cliErr == nil; ok != tt.wantOK {
				t.Fatalf("handshake: server %v, client %v; want ok=%v", srvErr, cliErr, tt.wantOK)
			}
		})
	}
}
