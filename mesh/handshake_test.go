package mesh

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/flynn/noise"
	"github.com/slackhq/nebula/cert"
	"github.com/slackhq/nebula/handshake"
	"github.com/slackhq/nebula/header"
)

// TestRepeatedStage1AnsweredFromCache: a Nebula stage 1 that arrives again
// (its initiator resent it while the answer was queued) is answered with
// the very bytes of the first answer, at most once per resend gap and
// path, and only the first copy is processed: the copies never reach the
// certificate check and the Noise message that CheckAndComplete would
// discard (third_party/nebula's patch, PATCHES.md). A copy within the gap
// gets no answer unless it came from another address; a different stage
// 1 from the same peer is processed in full. Without the patch every copy logs "Handshake message received".
func TestRepeatedStage1AnsweredFromCache(t *testing.T) {
	skipUnderRace(t)
	ca := testCA(t)
	lhCert, lhKey := hostCert(t, ca, "lh", 1)
	peerCert, peerKey := hostCert(t, ca, "peer", 2)
	seen := &stage1Counter{}
	_, port := startLighthouse(t, userspaceConfig(ca, lhCert, lhKey), slog.New(seen))

	conn, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	first := stage1(t, peerCert, peerKey, 7001)
	answer := exchange(t, conn, first, 5*time.Second)
	answered := time.Now()
	if answer == nil {
		t.Fatal("no stage 2")
	}
	// Copies that arrive together get one answer; the next copy after the
	// gap gets the first answer again, from the cache.
	const gap = 500 * time.Millisecond // third_party/nebula stage2ResendGap
	var again []byte
	copies := 0
	for again == nil && time.Since(answered) < 5*time.Second {
		again = exchange(t, conn, first, 100*time.Millisecond)
		copies++
	}
	if took := time.Since(answered); again == nil || took < gap-50*time.Millisecond {
		t.Fatalf("after %d copies in %s: answered again %v, want once the %s gap has passed", copies, took.Round(time.Millisecond), again != nil, gap)
	}
	if copies < 3 {
		t.Fatalf("only %d copies sent before the answer came again", copies)
	}
	if !bytes.Equal(again, answer) {
		t.Fatal("a copy after the resend gap was answered with other bytes than the first copy's stage 2")
	}
	// A copy that comes another way (an initiator tries every address it
	// knows) is answered at once.
	other, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if a := exchange(t, other, first, 5*time.Second); a == nil || !bytes.Equal(a, answer) {
		t.Fatal("a copy from another address within the gap was not answered with the first copy's stage 2")
	}
	if got := seen.received(); got != 1 {
		t.Fatalf("%d copies of one stage 1 went through the full handshake, want 1", got)
	}
	// Nebula logs a cached answer after sending it.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if !waitFor(ctx, func() bool { return seen.cached() == 2 }) {
		t.Fatalf("%d cached stage 2 logged, want 2", seen.cached())
	}

	second := exchange(t, conn, stage1(t, peerCert, peerKey, 7002), 5*time.Second)
	if second == nil || bytes.Equal(second, answer) {
		t.Fatal("a new stage 1 was not answered with a new stage 2")
	}
	if got := seen.received(); got != 2 {
		t.Fatalf("a new stage 1 from the same peer: %d full handshakes in all, want 2", got)
	}
}

// stage1 is a Nebula IX stage 1 packet from the holder of certPEM and
// keyPEM with the given initiator index, as Nebula's handshake.Machine
// builds it (Initiate): a fresh ephemeral key each time.
func stage1(t *testing.T, certPEM, keyPEM []byte, index uint32) []byte {
	t.Helper()
	crt, _, err := cert.UnmarshalCertificateFromPEM(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	key, _, _, err := cert.UnmarshalPrivateKeyFromPEM(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	hsCert, err := crt.MarshalForHandshakes()
	if err != nil {
		t.Fatal(err)
	}
	hs, err := noise.NewHandshakeState(noise.Config{
		CipherSuite:   noise.NewCipherSuite(noise.DH25519, noise.CipherAESGCM, noise.HashSHA256),
		Random:        rand.Reader,
		Pattern:       noise.HandshakeIX,
		Initiator:     true,
		StaticKeypair: noise.DHKey{Private: key, Public: crt.PublicKey()},
		PresharedKey:  []byte{},
	})
	if err != nil {
		t.Fatal(err)
	}
	payload := handshake.MarshalPayload(nil, handshake.Payload{
		InitiatorIndex: index,
		Time:           uint64(time.Now().UnixNano()),
		Cert:           hsCert,
		CertVersion:    uint32(crt.Version()),
	})
	h := header.Encode(make([]byte, header.Len), header.Version, header.Handshake, header.HandshakeIXPSK0, 0, 1)
	msg, _, _, err := hs.WriteMessage(h, payload)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// exchange sends one packet and returns the stage 2 that answers it
// within wait, or nil.
func exchange(t *testing.T, conn *net.UDPConn, packet []byte, wait time.Duration) []byte {
	t.Helper()
	if _, err := conn.Write(packet); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 9001)
	if err := conn.SetReadDeadline(time.Now().Add(wait)); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := conn.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		var h header.H
		if err := h.Parse(buf[:n]); err == nil && h.Type == header.Handshake && h.MessageCounter == 2 {
			return bytes.Clone(buf[:n])
		}
	}
}

// stage1Counter is a slog handler that counts the Nebula lines of a
// responder's handshakes: stage 1 packets handled in full, and stage 2
// answers sent from the cache.
type stage1Counter struct {
	mu              sync.Mutex
	full, fromCache int
}

func (c *stage1Counter) Enabled(context.Context, slog.Level) bool { return true }
func (c *stage1Counter) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *stage1Counter) WithGroup(string) slog.Handler            { return c }

func (c *stage1Counter) Handle(_ context.Context, r slog.Record) error {
	var cachedAttr string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "cached" {
			cachedAttr = a.Value.String()
		}
		return true
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	// The node under test is only ever the responder, so every "Handshake
	// message received" is a stage 1 handled in full. (Since Nebula 1.11
	// the line's stage is the handshake machine's message index after it
	// wrote the answer, 2, where 1.10 said 1.)
	switch {
	case r.Message == "Handshake message received":
		c.full++
	case r.Message == "Handshake message sent" && cachedAttr == "true":
		c.fromCache++
	}
	return nil
}

func (c *stage1Counter) received() int { c.mu.Lock(); defer c.mu.Unlock(); return c.full }
func (c *stage1Counter) cached() int   { c.mu.Lock(); defer c.mu.Unlock(); return c.fromCache }
