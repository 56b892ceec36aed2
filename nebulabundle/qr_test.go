package nebulabundle

import (
	"bytes"
	"image/png"
	"testing"
)

// TestCertQR: a v1 and a v2 certificate each give a PNG of QRSize
// pixels, the bigger certificate a different image; without a single
// certificate there is no code.
func TestCertQR(t *testing.T) {
	var imgs [][]byte
	for _, dual := range []bool{false, true} {
		b := stockBundle(issue(t, dual), dual)
		raw, err := b.CertQR()
		if err != nil {
			t.Fatalf("dual-stack %v: %v", dual, err)
		}
		img, err := png.Decode(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("dual-stack %v: not a PNG: %v", dual, err)
		}
		if r := img.Bounds(); r.Dx() != QRSize || r.Dy() != QRSize {
			t.Fatalf("dual-stack %v: %v, want %dx%d", dual, r, QRSize, QRSize)
		}
		imgs = append(imgs, raw)
	}
	if bytes.Equal(imgs[0], imgs[1]) {
		t.Error("two certificates gave the same image")
	}
	if _, err := (Bundle{Cert: append(fakePEM("NEBULA CERTIFICATE"), fakePEM("NEBULA CERTIFICATE")...)}).CertQR(); err == nil {
		t.Error("CertQR encoded two certificates")
	}
}
