// Package dnsconfig stands in for github.com/DefinedNet/dnsconfig, which
// the Go module proxy refuses, when stocknebula builds upstream Nebula
// v1.12 (PATCHES.md in third_party/nebula). Nebula's `dns` stanza that
// uses it is experimental, off by default and macOS and Windows only; here
// a Manager changes nothing on the host and declines every configuration,
// which Nebula logs as a warning and otherwise ignores.
package dnsconfig

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
)

// ErrConfigurationDeclined is what Set returns: this host's DNS is never
// managed.
var ErrConfigurationDeclined = errors.New("dnsconfig stand-in: host DNS is not managed in this build")

// ErrInterfaceRequired is never returned by the stand-in.
var ErrInterfaceRequired = errors.New("dnsconfig stand-in: an interface is required")

// BackendKind names a resolver backend; only BackendAuto exists here.
type BackendKind int

const BackendAuto BackendKind = 0

// Options configures New.
type Options struct {
	Identity      string
	InterfaceName string
	Logger        *slog.Logger
	ForceBackend  BackendKind
}

// Config is the resolver configuration Nebula asks for.
type Config struct {
	Nameservers   []netip.Addr
	SearchDomains []string
	MatchDomains  []string
}

// Validate accepts any configuration with a nameserver.
func (c Config) Validate() error {
	if len(c.Nameservers) == 0 {
		return errors.New("dnsconfig stand-in: no nameservers")
	}
	return nil
}

// IsSplit reports whether only the match domains go to the nameservers.
func (c Config) IsSplit() bool { return len(c.MatchDomains) > 0 }

// ValidateIdentity accepts any non-empty identity.
func ValidateIdentity(identity string) error {
	if identity == "" {
		return errors.New("dnsconfig stand-in: empty identity")
	}
	return nil
}

// Manager changes nothing.
type Manager struct{}

// New returns a Manager that changes nothing.
func New(context.Context, Options) (*Manager, error) { return &Manager{}, nil }

// Set declines every configuration.
func (*Manager) Set(Config) error { return ErrConfigurationDeclined }

// Clear has nothing to clear.
func (*Manager) Clear() error { return nil }

// Close has nothing to close.
func (*Manager) Close() error { return nil }
