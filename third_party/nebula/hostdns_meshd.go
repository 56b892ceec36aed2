package nebula

// meshd stand-in for upstream's hostdns.go (third_party/nebula/PATCHES.md):
// the experimental `dns` stanza (v1.12.0, macOS and Windows only) needs
// github.com/DefinedNet/dnsconfig, which the Go module proxy refuses, so
// the fork leaves hostdns.go out and main.go calls these instead. meshd
// answers names itself and routes its domain to itself through
// systemd-resolved; Nebula never touches the host's resolver here.

import (
	"errors"
	"log/slog"

	"github.com/slackhq/nebula/config"
)

// hostDNS stands in for upstream's host resolver manager: nil, so Start,
// Restore and Recover do nothing.
type hostDNS struct{}

// errNoHostDNS refuses a config that enables the stanza, rather than
// leaving the host's resolver silently unmanaged.
var errNoHostDNS = errors.New("dns.enabled: this build of nebula (meshd's) has no host DNS support")

// loadHostDNSConfig checks the `dns` stanza: only a disabled one is
// accepted.
func loadHostDNSConfig(c *config.C, _ bool) (struct{}, error) {
	if c.GetBool("dns.enabled", false) {
		return struct{}{}, errNoHostDNS
	}
	return struct{}{}, nil
}

// newHostDNSFromConfig returns no manager; a reload that enables the
// stanza is reported as failed.
func newHostDNSFromConfig(_ *slog.Logger, c *config.C) (*hostDNS, error) {
	if _, err := loadHostDNSConfig(c, false); err != nil {
		return nil, err
	}
	c.RegisterReloadCallback(func(c *config.C, r *config.Reload) {
		if _, err := loadHostDNSConfig(c, false); err != nil {
			r.Failed()
		}
	})
	return nil, nil
}

func (s *hostDNS) Recover() {}
func (s *hostDNS) Start()   {}
func (s *hostDNS) Restore() {}
