package main

import (
	"crypto/ecdh"
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/nebulabundle"
	"github.com/meshd/meshd/pki"
	"github.com/meshd/meshd/trust"
)

// The test seed links pki (and so Nebula's cert package) into the test
// binary only: meshctl itself links neither (deps_test.go).

// nebulaSeed is a control node's enroll port as `meshctl nebula-bundle`
// meets it: pinned TLS with a control leaf of the cluster CA, GET
// TimePath, and POST NebulaPath answered with a certificate the CA signs
// for the public key sent, or with refuse when it is set.
type nebulaSeed struct {
	t      *testing.T
	ca     *pki.CA
	addr   string
	refuse codes.Code

	mu     sync.Mutex
	hits   []string // "METHOD path" of every request
	bodies [][]byte // each NebulaPath body as it arrived
}

func newNebulaSeed(t *testing.T) *nebulaSeed {
	t.Helper()
	// On the wall clock: the client checks the seed's leaf and clock
	// against its own, time.Now.
	now := time.Now()
	ca, err := pki.NewCA("prod", netip.MustParsePrefix("10.42.0.0/16"), now)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pki.NewKeys("c1")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.SignTLS(pki.LeafRequest{CSR: keys.CSR, Name: "c1", NodeID: "id-c1", Role: pki.RoleControl,
		IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}, now)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pki.ServerTLSConfig(&pki.Identity{CACert: ca.CertPEM(), Cert: leaf, Key: keys.TLSKeyPEM})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &nebulaSeed{t: t, ca: ca, addr: ln.Addr().String()}
	srv := &http.Server{Handler: s, TLSConfig: cfg, ErrorLog: log.New(io.Discard, "", 0)}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.ServeTLS(ln, "", "") })
	t.Cleanup(func() {
		_ = srv.Close()
		wg.Wait()
	})
	return s
}

func (s *nebulaSeed) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.hits = append(s.hits, r.Method+" "+r.URL.Path)
	s.mu.Unlock()
	switch {
	case r.Method == http.MethodGet && r.URL.Path == enroll.TimePath:
		writeJSON(w, http.StatusOK, enroll.TimeResponse{ServerTime: time.Now()})
		return
	case r.Method != http.MethodPost || r.URL.Path != enroll.NebulaPath:
		http.NotFound(w, r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.bodies = append(s.bodies, body)
	s.mu.Unlock()
	if s.refuse != "" {
		writeJSON(w, s.refuse.Status(), enroll.ErrorBody{Code: string(s.refuse), Cause: s.refuse.Cause(), Remedy: s.refuse.Remedy()})
		return
	}
	var req enroll.NebulaRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeJSON(w, http.StatusBadRequest, enroll.ErrorBody{Code: string(codes.BadRequest), Detail: err.Error()})
		return
	}
	now := time.Now()
	crt, err := s.ca.SignNebula(pki.NebulaRequest{PublicKey: req.PublicKey, Name: req.Name,
		IP: netip.MustParsePrefix("10.42.0.7/16"), Groups: []string{"nebula", "mobile"}, Lifetime: 720 * time.Hour}, now)
	if err != nil {
		writeJSON(w, codes.NebulaKeyCurve.Status(), enroll.ErrorBody{Code: string(codes.NebulaKeyCurve), Detail: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, enroll.NebulaResponse{
		NodeID: "id-" + req.Name, Name: req.Name, ClusterID: "0123456789abcdef0123456789abcdef", ClusterName: "prod",
		CACert: s.ca.CertPEM(), NebulaCACert: s.ca.NebulaCertPEM(), NebulaCert: crt,
		Expires: now.Add(720 * time.Hour).Truncate(time.Second), OverlayIP: netip.MustParsePrefix("10.42.0.7/16"),
		Groups: []string{"nebula", "mobile"},
		Lighthouses: []enroll.NebulaHost{
			{Name: "c1", Overlay: netip.MustParseAddr("10.42.0.1"), Underlay: []string{"192.0.2.1:4242"}},
			{Name: "c2", Overlay: netip.MustParseAddr("10.42.0.2"), Underlay: []string{"lh2.example.net:4242", "198.51.100.2:4242"}},
		},
		Relays: []netip.Addr{netip.MustParseAddr("10.42.0.1")}, ServerTime: now,
	})
}

// sent returns what the seed has been asked, and the bundle requests.
func (s *nebulaSeed) sent() ([]string, [][]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.hits), slices.Clone(s.bodies)
}

// tokenFile writes a token for name with role and renew, naming s as its
// only seed, into a 0600 file, and returns the file and the token.
func (s *nebulaSeed) tokenFile(t *testing.T, name string, role trust.Role, renew bool) (string, string) {
	t.Helper()
	return s.tokenFileUntil(t, name, role, renew, time.Now().Add(15*time.Minute))
}

// tokenFileUntil is tokenFile for a token that expires at exp.
func (s *nebulaSeed) tokenFileUntil(t *testing.T, name string, role trust.Role, renew bool, exp time.Time) (string, string) {
	t.Helper()
	secret, err := enroll.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := enroll.Token{ClusterID: "0123456789abcdef0123456789abcdef", CA: s.ca.Fingerprint(), Seeds: []string{s.addr},
		Name: name, Role: role, Expires: exp.Truncate(time.Second).UTC(), Secret: secret, Renew: renew}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), name+".token")
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, tok
}

// keyPair writes a Nebula key pair as nebula-cert keygen would and
// returns the paths and the public key.
func keyPair(t *testing.T) (pubFile, keyFile string, pub []byte) {
	t.Helper()
	pub, priv, err := nebulabundle.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pubFile, keyFile = filepath.Join(dir, "host.pub"), filepath.Join(dir, "host.key")
	if err := os.WriteFile(pubFile, pub, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, priv, 0o600); err != nil {
		t.Fatal(err)
	}
	return pubFile, keyFile, pub
}

// requestOf decodes the one bundle request the seed got, and checks it
// carried a public key and nothing private.
func requestOf(t *testing.T, bodies [][]byte) enroll.NebulaRequest {
	t.Helper()
	if len(bodies) != 1 {
		t.Fatalf("the seed got %d bundle requests, want 1", len(bodies))
	}
	if strings.Contains(string(bodies[0]), "PRIVATE") {
		t.Fatalf("the bundle request carries a private key:\n%s", bodies[0])
	}
	var req enroll.NebulaRequest
	if err := json.Unmarshal(bodies[0], &req); err != nil {
		t.Fatal(err)
	}
	if blk, _ := pem.Decode(req.PublicKey); blk == nil || blk.Type != "NEBULA X25519 PUBLIC KEY" {
		t.Fatalf("the request's public key is not a Nebula X25519 public key: %q", req.PublicKey)
	}
	return req
}

// modes returns the permission bits of each file in dir by name.
func modes(t *testing.T, dir string) map[string]os.FileMode {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]os.FileMode{}
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = fi.Mode().Perm()
	}
	return out
}

func TestNebulaBundleGenerate(t *testing.T) {
	s := newNebulaSeed(t)
	tokFile, tok := s.tokenFile(t, "phone1", trust.RoleNebula, false)
	out := filepath.Join(t.TempDir(), "phone1")
	// The socket goes nowhere: nebula-bundle needs no meshd.
	r := meshctl(t, "--socket", nowhere(t), "nebula-bundle", "--token-file", tokFile, "--generate", "--out", out, "--qr")
	if r.exit != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.exit, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout+r.stderr, tok) {
		t.Fatal("the token was printed")
	}
	want := map[string]os.FileMode{"ca.crt": 0o644, "host.crt": 0o644, "host.key": 0o600, "config.yml": 0o644, QRFile: 0o644}
	if got := modes(t, out); !maps(got, want) {
		t.Fatalf("bundle files %v, want %v", got, want)
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("bundle dir: %v, mode %v; want 0700", err, fi.Mode().Perm())
	}
	// The request carried the public half of the key written to host.key.
	_, bodies := s.sent()
	req := requestOf(t, bodies)
	if req.Name != "phone1" || req.Renew {
		t.Errorf("request names %q, renew %v; want phone1, no renewal", req.Name, req.Renew)
	}
	key, err := os.ReadFile(filepath.Join(out, "host.key"))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(key)
	priv, err := ecdh.X25519().NewPrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if sentPub, _ := pem.Decode(req.PublicKey); string(sentPub.Bytes) != string(priv.PublicKey().Bytes()) {
		t.Error("the public key sent is not host.key's")
	}
	cfg, err := os.ReadFile(filepath.Join(out, "config.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"10.42.0.1", "192.0.2.1:4242", "198.51.100.2:4242", "group: mobile", "proto: icmp", "key: host.key"} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("config.yml lacks %q:\n%s", want, cfg)
		}
	}
	if strings.Contains(string(cfg), "lh2.example.net") {
		t.Errorf("config.yml names the hostname underlay:\n%s", cfg)
	}
	if !strings.Contains(r.stderr, "lighthouse c2: underlay lh2.example.net:4242 is not an IP address and port") {
		t.Errorf("stderr does not warn of the hostname underlay:\n%s", r.stderr)
	}
	for _, want := range []string{"bundle of phone1, a stock Nebula member of cluster \"prod\" (node id id-phone1)", "overlay: 10.42.0.7/16", "certificate expires: ",
		"wrote " + out + ": ca.crt, host.crt, host.key, config.yml, " + QRFile, "cd " + out + " && nebula -config config.yml"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	if png, _ := os.ReadFile(filepath.Join(out, QRFile)); !strings.HasPrefix(string(png), "\x89PNG") {
		t.Errorf("%s is not a PNG", QRFile)
	}
}

func maps(a, b map[string]os.FileMode) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestNebulaBundlePubkey(t *testing.T) {
	pubFile, keyFile, pub := keyPair(t)
	for _, tc := range []struct {
		name, keyArg string
		renew        bool
	}{
		{"public-key", pubFile, false},
		// Given the private key, meshctl sends only its public half.
		{"private-key", keyFile, false},
		{"renew", pubFile, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newNebulaSeed(t)
			tokFile, tok := s.tokenFile(t, "r1", trust.RoleNebula, tc.renew)
			out := t.TempDir()
			args := []string{"--socket", nowhere(t), "nebula-bundle", "--token-file", tokFile, "--pubkey", tc.keyArg,
				"--out", out, "--pki-dir", "/etc/nebula/", "-o", "json"}
			if tc.renew {
				args = append(args, "--renew")
			}
			r := meshctl(t, args...)
			if r.exit != exitOK {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.exit, r.stdout, r.stderr)
			}
			if strings.Contains(r.stdout+r.stderr, tok) {
				t.Fatal("the token was printed")
			}
			_, bodies := s.sent()
			req := requestOf(t, bodies)
			if string(req.PublicKey) != string(pub) || req.Renew != tc.renew {
				t.Errorf("request public key %q renew %v, want %q renew %v", req.PublicKey, req.Renew, pub, tc.renew)
			}
			want := map[string]os.FileMode{"ca.crt": 0o644, "host.crt": 0o644, "config.yml": 0o644}
			if got := modes(t, out); !maps(got, want) {
				t.Fatalf("bundle files %v, want %v (no host.key: the device keeps its own)", got, want)
			}
			cfg, _ := os.ReadFile(filepath.Join(out, "config.yml"))
			for _, want := range []string{"ca: /etc/nebula/ca.crt", "cert: /etc/nebula/host.crt", "key: /etc/nebula/host.key"} {
				if !strings.Contains(string(cfg), want) {
					t.Errorf("config.yml lacks %q:\n%s", want, cfg)
				}
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
				t.Fatalf("stdout is not a JSON object (%v):\n%s", err, r.stdout)
			}
			if m["name"] != "r1" || m["overlay_ip"] != "10.42.0.7/16" || m["dir"] != out || m["key_generated"] != false ||
				m["pki_dir"] != "/etc/nebula" || m["command"] != "nebula -config /etc/nebula/config.yml" || (m["renew"] == true) != tc.renew {
				t.Errorf("json: %v", m)
			}
			if files, _ := json.Marshal(m["files"]); string(files) != `["ca.crt","host.crt","config.yml"]` {
				t.Errorf("json files %s", files)
			}
		})
	}
}

// TestNebulaBundleRefused: what cannot work is refused with its code
// before the token is spent (nothing reaches the seed, or only the
// client's own checks run), a refusal by the seed comes out as the
// seed's code, and neither writes anything.
func TestNebulaBundleRefused(t *testing.T) {
	pubFile, _, _ := keyPair(t)
	otherPEM := filepath.Join(t.TempDir(), "p256.pub")
	if err := os.WriteFile(otherPEM, pem.EncodeToMemory(&pem.Block{Type: "NEBULA P256 PUBLIC KEY", Bytes: make([]byte, 65)}), 0o644); err != nil {
		t.Fatal(err)
	}
	withKey := t.TempDir()
	if err := os.WriteFile(filepath.Join(withKey, "host.key"), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		role   trust.Role
		renewT bool       // a renewal token
		refuse codes.Code // the seed's answer
		out    string     // "" a fresh directory that must stay absent
		args   []string
		exit   int
		code   codes.Code
		asked  bool // the seed was asked for a bundle
	}{
		{name: "no-key", args: nil, exit: exitFailure, code: codes.BadRequest},
		{name: "both-keys", args: []string{"--pubkey", pubFile, "--generate"}, exit: exitFailure, code: codes.BadRequest},
		{name: "renew-generate", renewT: true, args: []string{"--generate", "--renew"}, exit: exitFailure, code: codes.BadRequest},
		{name: "relative-pki-dir", args: []string{"--generate", "--pki-dir", "etc/nebula"}, exit: exitFailure, code: codes.BadRequest},
		{name: "p256-key", args: []string{"--pubkey", otherPEM}, exit: exitFailure, code: codes.NebulaKeyCurve},
		{name: "generate-over-key", out: withKey, args: []string{"--generate"}, exit: exitFailure, code: codes.BadRequest},
		{name: "worker-token", role: trust.RoleWorker, args: []string{"--generate"}, exit: exitFailure, code: codes.NotNebulaToken},
		{name: "renew-with-first-token", args: []string{"--pubkey", pubFile, "--renew"}, exit: exitFailure, code: codes.NotNebulaToken},
		{name: "renewal-token-without-renew", renewT: true, args: []string{"--pubkey", pubFile}, exit: exitFailure, code: codes.NotNebulaToken},
		{name: "seed-key-in-use", refuse: codes.NebulaKeyInUse, args: []string{"--generate"}, exit: exitFailure, code: codes.NebulaKeyInUse, asked: true},
		{name: "seed-renew-refused", renewT: true, refuse: codes.NebulaRenewRefused, args: []string{"--pubkey", pubFile, "--renew"},
			exit: exitFailure, code: codes.NebulaRenewRefused, asked: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newNebulaSeed(t)
			s.refuse = tt.refuse
			role := tt.role
			if role == "" {
				role = trust.RoleNebula
			}
			tokFile, tok := s.tokenFile(t, "phone1", role, tt.renewT)
			out := tt.out
			if out == "" {
				out = filepath.Join(t.TempDir(), "bundle")
			}
			before := modes(t, filepath.Dir(out))
			r := meshctl(t, append([]string{"--socket", nowhere(t), "nebula-bundle", "--token-file", tokFile, "--out", out}, tt.args...)...)
			checkFailure(t, r, tt.exit, tt.code)
			if strings.Contains(r.stdout+r.stderr, tok) || strings.Contains(r.stdout+r.stderr, "PRIVATE") {
				t.Fatalf("the token or a private key was printed:\n%s%s", r.stdout, r.stderr)
			}
			hits, bodies := s.sent()
			if tt.asked != (len(bodies) > 0) {
				t.Errorf("the seed got %d bundle requests (%v), want asked=%v", len(bodies), hits, tt.asked)
			}
			if !tt.asked && len(hits) > 0 {
				t.Errorf("the seed was contacted: %v", hits)
			}
			if len(bodies) > 0 {
				requestOf(t, bodies)
			}
			if after := modes(t, filepath.Dir(out)); !maps(before, after) {
				t.Errorf("files beside the bundle changed: %v, then %v", before, after)
			}
			if tt.out != "" {
				if got := modes(t, out); !maps(got, map[string]os.FileMode{"host.key": 0o600}) {
					t.Errorf("bundle dir now holds %v", got)
				}
			} else if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("the bundle dir was made: %v", err)
			}
		})
	}
	t.Run("expired-token", func(t *testing.T) {
		s := newNebulaSeed(t)
		tokFile, _ := s.tokenFileUntil(t, "phone1", trust.RoleNebula, false, time.Now().Add(-time.Minute))
		out := filepath.Join(t.TempDir(), "bundle")
		checkFailure(t, meshctl(t, "--socket", nowhere(t), "nebula-bundle", "--token-file", tokFile, "--generate", "--out", out),
			exitFailure, codes.TokenExpired)
		if hits, _ := s.sent(); len(hits) > 0 {
			t.Errorf("the seed was contacted: %v", hits)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("the bundle dir was made: %v", err)
		}
	})
	t.Run("usage", func(t *testing.T) {
		for _, a := range [][]string{
			{"nebula-bundle", "--generate", "--out", t.TempDir()},           // no token
			{"nebula-bundle", "--token-file", "/nonexistent", "--generate"}, // no --out
			{"nebula-bundle", "extra", "--generate"},                        // an argument
			{"nebula-bundle", "--generate", "-o", "yaml"},
		} {
			if r := meshctl(t, append([]string{"--socket", nowhere(t)}, a...)...); r.exit != exitUsage {
				t.Errorf("%v: exit %d, want %d\n%s", a, r.exit, exitUsage, r.stderr)
			}
		}
	})
}
