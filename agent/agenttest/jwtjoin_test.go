package agenttest_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/agenttest"
	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/idtoken"
	"github.com/meshd/meshd/idtoken/idtokentest"
)

// TestJoinByJWT: a control node that trusts a test issuer (its JWKS file)
// admits a machine that holds no cluster secret, only a short-lived JWT
// the issuer signed, under the name its claim rule gives (ci-1), in the
// rule's groups, ephemeral; the same JWT again is refused JWTReplayed.
// Each bad JWT is refused with its own code before anything is spent: a
// wrong audience, an expired one, an unknown issuer, claims no rule
// admits, a lifetime over an hour; and a wrong CA pin never reaches the
// seed's enroll API (CAMismatch): there is no trust on first use.
func TestJoinByJWT(t *testing.T) {
	clock := &agenttest.Clock{}
	iss := idtokentest.New(t, "https://ci.example.test")
	jwks := iss.WriteJWKS(t, t.TempDir())
	rogue := idtokentest.New(t, "https://rogue.example.test")
	c1 := agenttest.NewNodeAt(t, "c1", agenttest.TakeIP(t), clock, func(c *config.File) {
		c.JWT.Issuers = []idtoken.Issuer{{Issuer: iss.URL, JWKSFile: jwks, Audience: "meshd-test",
			Rules: []idtoken.Rule{{Claims: map[string]string{"repository": "acme/app"}, Role: "worker", Groups: []string{"ci"},
				NamePrefix: "ci-", Ephemeral: true}}}}
	})
	init := c1.Init(t, "alpha")
	seed := net.JoinHostPort(c1.IP, "7300")

	now := time.Now()
	good := idtokentest.Claims{Subject: "repo:acme/app", Audience: "meshd-test", JTI: "run-1", IssuedAt: now.Add(-time.Minute),
		Life: 10 * time.Minute, Extra: map[string]any{"repository": "acme/app"}}
	var joiners []*agenttest.Node
	join := func(name, jwt, ca string) (*apitype.JoinResult, error) {
		m := agenttest.NewNode(t, name, clock)
		joiners = append(joiners, m)
		return m.Client.Join(t.Context(), apitype.JoinRequest{JWT: jwt, Seed: seed, CASHA256: ca},
			func(l apitype.JoinLine) { t.Logf("%s join: %s", name, l.Step) })
	}

	first := iss.Token(t, good)
	res, err := join("m1", first, init.CAFingerprint)
	if err != nil {
		t.Fatalf("join by JWT: %v", err)
	}
	if res.Node != "ci-1" || res.Role != "worker" {
		t.Fatalf("joined as %s (%s), want ci-1 (worker)", res.Node, res.Role)
	}
	var row *apitype.Node
	for _, n := range c1.Nodes(t) {
		if n.Name == "ci-1" {
			row = &n
		}
	}
	if row == nil || row.State != "active" || len(row.Groups) != 1 || row.Groups[0] != "ci" {
		t.Fatalf("ci-1's row: %+v", row)
	}

	if _, err := join("m2", iss.Token(t, good), init.CAFingerprint); codes.Of(err) != codes.JWTReplayed {
		t.Fatalf("the same JWT again: %v, want %s", err, codes.JWTReplayed)
	}
	bad := func(edit func(*idtokentest.Claims)) string {
		c := good
		c.JTI = "run-" + time.Now().Format("150405.000000000")
		edit(&c)
		return iss.Token(t, c)
	}
	for _, tc := range []struct {
		name string
		jwt  string
		want codes.Code
	}{
		{"wrong audience", bad(func(c *idtokentest.Claims) { c.Audience = "other" }), codes.JWTAudience},
		{"expired", bad(func(c *idtokentest.Claims) { c.IssuedAt = now.Add(-20 * time.Minute) }), codes.JWTExpired},
		{"unknown issuer", rogue.Token(t, good), codes.JWTIssuerUnknown},
		{"no rule", bad(func(c *idtokentest.Claims) { c.Extra = map[string]any{"repository": "evil/app"} }), codes.JWTNoRule},
		{"lives two hours", bad(func(c *idtokentest.Claims) { c.Life = 2 * time.Hour }), codes.JWTLifetime},
	} {
		if _, err := join("m3", tc.jwt, init.CAFingerprint); codes.Of(err) != tc.want {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.want)
		}
	}
	wrongCA := "00" + init.CAFingerprint[2:] // a pin that differs from the CA's in its first byte
	if strings.HasPrefix(init.CAFingerprint, "00") {
		wrongCA = "ff" + init.CAFingerprint[2:] // the CA's own fingerprint began with 00 (1 run in 256)
	}
	if _, err := join("m4", bad(func(*idtokentest.Claims) {}), wrongCA); codes.Of(err) != codes.CAMismatch {
		t.Errorf("a wrong CA pin: %v, want %s", err, codes.CAMismatch)
	}
	if got := len(c1.Nodes(t)); got != 2 {
		t.Fatalf("%d nodes after the refusals, want 2 (c1, ci-1)", got)
	}
	// The JWT is a credential: no log line of the seed or the joiners
	// carries it (nor its signature).
	sig := first[strings.LastIndexByte(first, '.')+1:]
	for _, n := range append([]*agenttest.Node{c1}, joiners...) {
		if strings.Contains(n.Logs(), sig) {
			t.Errorf("%s's log carries the JWT's signature", n.Name)
		}
	}
}
