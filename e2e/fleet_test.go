//go:build e2e

package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/idtoken/idtokentest"
)

// Issue 31: fleets, on the real binaries in namespaces. One key file, as
// an image bakes it, joins several machines at once, each under its own
// name, no more than the key's uses; ephemeral nodes killed vanish from
// every member's `nodes`, from the names and from the overlay's records
// within their window, and one that restarts within it stays; a CI job
// joins with its OIDC token through a test issuer served over HTTP in the
// test (OpenID discovery and its JWKS), and the same token again is
// refused.

// fleetEphemeralAfter is the origin's ephemeral_after: the smallest the
// config takes, so the test waits little.
const fleetEphemeralAfter = 10 * time.Second

// joinedAs matches the last line of a successful `meshctl join`.
var joinedAs = regexp.MustCompile(`joined cluster "[^"]+" as ([a-z0-9-]+) \(`)

// appendConfig adds lines to nd's meshd.yaml before it starts.
func appendConfig(t testing.TB, nd *Node, lines string) {
	t.Helper()
	f, err := os.OpenFile(nd.Config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(lines); err != nil {
		t.Fatal(err)
	}
}

// serveIssuer serves iss's discovery document and keys over HTTPS on h's
// underlay address, port 8443, from the test process (a listener opened
// in h's namespace), until the test ends, and returns the PEM file of the
// CA that signed its certificate: a meshd trusts it through SSL_CERT_FILE
// (discovery takes https issuers only).
func serveIssuer(t testing.TB, h *Host, iss *idtokentest.Issuer) string {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e issuer CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2),
		Subject: pkix.Name{CommonName: h.IP}, IPAddresses: []net.IP{net.ParseIP(h.IP)},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "issuer-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	ln := h.ListenTCP(t, "8443")
	srv := &http.Server{Handler: iss.Handler(t), ReadHeaderTimeout: 5 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}}}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	return caFile
}

// fleetJoin is one machine's `meshctl join` with the key file.
type fleetJoin struct {
	nd     *Node
	name   string // the name the cluster gave, from the join's output
	exit   int
	stderr string
}

// TestFleet runs with the suite's timers (fast) and with meshd's
// defaults (lan: gossip's LAN timing, raft's own), the killed node's time
// logged for each; the join by OIDC token runs in the first only.
func TestFleet(t *testing.T) {
	for _, timers := range []string{"fast", "lan"} {
		t.Run(timers, func(t *testing.T) { fleet(t, timers, timers == "fast") })
	}
}

func fleet(t *testing.T, timers string, withJWT bool) {
	n := NewNet(t)
	n.Timers, n.DefaultRaft = timers, timers == "lan"
	issuerHost := n.AddHost("issuer")
	iss := idtokentest.New(t, "https://"+issuerHost.IP+":8443")
	issuerCA := serveIssuer(t, issuerHost, iss)

	origin := n.NewNode("origin")
	origin.Env = []string{"SSL_CERT_FILE=" + issuerCA} // the test issuer's CA, for discovery
	appendConfig(t, origin, fmt.Sprintf(`ephemeral_after: %s
jwt:
  issuers:
    - issuer: %s
      discovery: true
      audience: meshd-e2e
      rules:
        - claims: {repository: acme/app}
          role: worker
          groups: [ci]
          name_prefix: ci-
          ephemeral: true
`, fleetEphemeralAfter, iss.URL))
	origin.Start(t)
	var init apitype.InitResponse
	if err := origin.CtlJSON(t.Context(), &init, "init", "--cluster", "e2e"); err != nil {
		t.Fatal(err)
	}

	// One key, three uses, four machines from the same image at once.
	var key apitype.AdmitResponse
	if err := origin.CtlJSON(t.Context(), &key, "admit", "--reusable", "--uses", "3", "--name-prefix", "web-", "--ephemeral"); err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "web.key")
	if err := os.WriteFile(keyFile, []byte(key.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	joins := make([]*fleetJoin, 4)
	for i := range joins {
		nd := n.NewNode(fmt.Sprintf("m%d", i+1))
		nd.Start(t)
		joins[i] = &fleetJoin{nd: nd}
	}
	var wg sync.WaitGroup
	for _, j := range joins {
		wg.Go(func() {
			out, errs, exit := j.nd.Ctl(t.Context(), "join", "--token-file", keyFile)
			j.exit, j.stderr = exit, errs
			if m := joinedAs.FindStringSubmatch(out); exit == 0 && m != nil {
				j.name = m[1]
			}
		})
	}
	wg.Wait()
	var names []string
	var members []*Node
	refused := 0
	for _, j := range joins {
		switch {
		case j.exit == 0 && j.name != "":
			names = append(names, j.name)
			j.nd.NodeName = j.name
			members = append(members, j.nd)
		case j.exit == 1 && firstCode(j.stderr) == codes.KeyExhausted:
			refused++
		default:
			t.Fatalf("%s's join: exit %d, name %q\n%s", j.nd.Host.Name, j.exit, j.name, j.stderr)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"web-1", "web-2", "web-3"}) || refused != 1 {
		t.Fatalf("four machines with a 3-use key: joined as %v, %d refused KeyExhausted; want web-1..web-3 and one", names, refused)
	}
	for _, r := range origin.Nodes(t) {
		if r.Name != "origin" && !r.Ephemeral {
			t.Errorf("%s is not ephemeral", r.Name)
		}
	}
	allPairsPing(t, append([]*Node{origin}, members...), 20*time.Second)

	// Killed: gone from every member's view and names within the window,
	// its removal audited and its record forgotten.
	byName := map[string]*Node{}
	for _, m := range members {
		byName[m.NodeName] = m
	}
	web1, web2, web3 := byName["web-1"], byName["web-2"], byName["web-3"]
	// web-3 restarts first (a crash and a restart within the window), then
	// web-2 dies for good: a reaper that kept web-3's down time across its
	// restart would remove it no later than web-2.
	web3.Kill()
	web3.Start(t)
	web2.Kill()
	killed := time.Now()
	bound := fleetEphemeralAfter + 20*time.Second // the window, gossip's failure detection, a sweep, the removal's round
	took := Eventually(t, bound, "web-2 vanishes from every member's nodes and names", func() error {
		for _, nd := range []*Node{origin, web1, web3} {
			var ns []apitype.Node
			if err := nd.CtlJSON(t.Context(), &ns, "nodes"); err != nil {
				return err
			}
			if slices.ContainsFunc(ns, func(r apitype.Node) bool { return r.Name == "web-2" }) {
				return fmt.Errorf("%s still lists web-2", nd.NodeName)
			}
			r, err := dig(t.Context(), nd.Host, "@"+nodeDNS, "web-2."+namesDomain, "A")
			if err != nil {
				return err
			}
			if r.Status != "NXDOMAIN" {
				return fmt.Errorf("%s answers web-2 with %s %v", nd.NodeName, r.Status, r.Answers)
			}
		}
		return nil
	})
	t.Logf("web-2 killed: gone from nodes and names everywhere %s later (ephemeral_after %s, timers %s)", took, fleetEphemeralAfter, timers)
	if since := time.Since(killed); since < fleetEphemeralAfter {
		t.Fatalf("web-2 removed %s after it was killed, inside its %s window", since, fleetEphemeralAfter)
	}
	var audit []apitype.AuditEvent
	if err := origin.CtlJSON(t.Context(), &audit, "audit"); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(audit, func(e apitype.AuditEvent) bool { return e.Code == codes.EventNodeForgotten && e.Subject == "web-2" }) {
		t.Fatalf("no %s for web-2 in the audit log", codes.EventNodeForgotten)
	}

	// A restart within the window is not a removal: web-3, down before
	// web-2, is still active once web-2 is gone, and reachable.
	if !slices.ContainsFunc(origin.Nodes(t), func(r apitype.Node) bool { return r.Name == "web-3" && r.State == "active" }) {
		t.Fatal("web-3, restarted within its window, was removed")
	}
	Eventually(t, 30*time.Second, "web-3 pings the origin after its restart", func() error {
		return web3.Ping(t.Context(), init.OverlayIP)
	})

	if !withJWT {
		return
	}
	// A CI job's OIDC token: admitted as ci-1 with no stored secret; the
	// same token from another machine is a replay.
	jwtFile := filepath.Join(t.TempDir(), "oidc.jwt")
	tok := iss.Token(t, idtokentest.Claims{Subject: "repo:acme/app:ref:refs/heads/main", Audience: "meshd-e2e", JTI: "run-1",
		IssuedAt: time.Now().Add(-time.Minute), Life: 10 * time.Minute, Extra: map[string]any{"repository": "acme/app"}})
	if err := os.WriteFile(jwtFile, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	seed := net.JoinHostPort(origin.Host.IP, "7300")
	ci := n.NewNode("ci")
	ci.Start(t)
	out := ci.MustCtl(t, "join", "--jwt-file", jwtFile, "--seed", seed, "--ca-sha256", init.CAFingerprint)
	if m := joinedAs.FindStringSubmatch(out); m == nil || m[1] != "ci-1" {
		t.Fatalf("the CI job joined as %v, want ci-1:\n%s", m, out)
	}
	again := n.NewNode("ci2")
	again.Start(t)
	if _, errs, exit := again.Ctl(t.Context(), "join", "--jwt-file", jwtFile, "--seed", seed, "--ca-sha256", init.CAFingerprint); exit != 1 || firstCode(errs) != codes.JWTReplayed {
		t.Fatalf("the same OIDC token again: exit %d, first code %s, want 1 and %s\n%s", exit, firstCode(errs), codes.JWTReplayed, errs)
	}
	for _, nd := range []*Node{origin, ci} {
		b, err := os.ReadFile(nd.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), tok[len(tok)-40:]) { // the signature's end
			t.Fatalf("%s's log carries the OIDC token", nd.NodeName)
		}
	}
}
