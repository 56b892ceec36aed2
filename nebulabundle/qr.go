package nebulabundle

import (
	"fmt"

	qrcode "github.com/skip2/go-qrcode"
)

// QRSize is the width and height in pixels of CertQR's image.
const QRSize = 512

// CertQR returns a PNG of a QR code holding b.Cert, the host certificate
// in PEM, as Mobile Nebula's "scan a certificate" reads it. Only the
// certificate, which is public: never the key. Error correction is
// medium; a v2 certificate's PEM fits with room to spare (QR holds 2,331
// bytes at that level).
func (b Bundle) CertQR() ([]byte, error) {
	if err := checkPEM("cert", b.Cert, certBlocks, false); err != nil {
		return nil, err
	}
	png, err := qrcode.Encode(string(b.Cert), qrcode.Medium, QRSize)
	if err != nil {
		return nil, fmt.Errorf("nebula bundle: certificate QR code: %w", err)
	}
	return png, nil
}
