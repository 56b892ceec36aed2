package member

import (
	"net/netip"

	"github.com/meshd/meshd/pki"
)

// overlay6 is this node's IPv6 overlay address as its Nebula runs it: the
// IPv6 network of the certificate last applied, with its prefix length.
// Invalid in an IPv4-only cluster, and on a node of a cluster moving to
// v2 certificates until its v2 certificate is applied.
func (ov *overlay) overlay6() netip.Prefix { return pki.NebulaOverlay6(ov.applied().Cert) }

// ownOverlay6 is the IPv6 overlay network of the certificate this node
// holds now (its live identity's, which a reload is about to apply): what
// its DNS answers AAAA in and what peers' IPv6 addresses it maps
// (desired.Inputs.SelfOverlay6). Invalid for a v1 certificate.
func (nd *node) ownOverlay6() netip.Prefix {
	if nd.live == nil {
		return netip.Prefix{}
	}
	cert := nd.live.Identity().NebulaCert
	return nd.overlay6Memo.get(func() netip.Prefix { return pki.NebulaOverlay6(cert).Masked() }, cert)
}
