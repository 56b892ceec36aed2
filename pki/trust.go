package pki

import (
	"crypto/x509"
	"time"

	"github.com/meshd/meshd/trust"
)

// The X.509 trust names live in package trust, which links no Nebula (so
// meshctl and enroll can); pki re-exports them under their old names.

// Fingerprint is trust.Fingerprint: the full SHA-256 of a certificate.
type Fingerprint = trust.Fingerprint

// Role is trust.Role: what a node may do in the cluster.
type Role = trust.Role

// The roles (trust.RoleControl and so on).
const (
	RoleControl = trust.RoleControl
	RoleWorker  = trust.RoleWorker
	RoleNebula  = trust.RoleNebula
)

// MaxGroups is trust.MaxGroups.
const MaxGroups = trust.MaxGroups

// FingerprintOf is trust.FingerprintOf.
func FingerprintOf(cert *x509.Certificate) Fingerprint { return trust.FingerprintOf(cert) }

// ParseFingerprint is trust.ParseFingerprint.
func ParseFingerprint(s string) (Fingerprint, error) { return trust.ParseFingerprint(s) }

// ParseRole is trust.ParseRole.
func ParseRole(s string) (Role, error) { return trust.ParseRole(s) }

// RoleOf is trust.RoleOf.
func RoleOf(c *x509.Certificate) (Role, error) { return trust.RoleOf(c) }

// NodeIDOf is trust.NodeIDOf.
func NodeIDOf(c *x509.Certificate) string { return trust.NodeIDOf(c) }

// VerifyPinned is trust.VerifyPinned.
func VerifyPinned(rawCerts [][]byte, pin Fingerprint, now time.Time) (*x509.Certificate, error) {
	return trust.VerifyPinned(rawCerts, pin, now)
}

// VerifyPinnedAny is trust.VerifyPinnedAny.
func VerifyPinnedAny(rawCerts [][]byte, pins []Fingerprint, now time.Time) (*x509.Certificate, error) {
	return trust.VerifyPinnedAny(rawCerts, pins, now)
}

// CSRPublicKey is trust.CSRPublicKey.
func CSRPublicKey(csrDER []byte) ([]byte, error) { return trust.CSRPublicKey(csrDER) }

// CheckNodeGroup is trust.CheckNodeGroup.
func CheckNodeGroup(g string) error { return trust.CheckNodeGroup(g) }

// CheckNodeGroups is trust.CheckNodeGroups.
func CheckNodeGroups(gs []string) error { return trust.CheckNodeGroups(gs) }

// CheckRuleGroup is trust.CheckRuleGroup.
func CheckRuleGroup(g string) error { return trust.CheckRuleGroup(g) }

// ParseCertPEM is trust.ParseCertPEM.
func ParseCertPEM(b []byte) (*x509.Certificate, error) { return trust.ParseCertPEM(b) }

// BundleCerts is trust.BundleCerts.
func BundleCerts(bundle []byte) ([]*x509.Certificate, error) { return trust.BundleCerts(bundle) }

// PinProto is trust.PinProto.
func PinProto(pin Fingerprint) string { return trust.PinProto(pin) }
