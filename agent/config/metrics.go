package config

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/meshd/meshd/codes"
)

// metricsAddr is metrics_addr parsed (Validate checked it) and whether it
// is a loopback address, served from the start, rather than the node's
// overlay address, served while the node runs.
func (c File) MetricsListen() (ap netip.AddrPort, loopback, ok bool) {
	if c.MetricsAddr == "" {
		return netip.AddrPort{}, false, false
	}
	ap, err := netip.ParseAddrPort(c.MetricsAddr)
	if err != nil {
		return netip.AddrPort{}, false, false
	}
	return ap, ap.Addr().IsLoopback(), true
}

// validMetricsAddr is Validate's check of metrics_addr: a loopback IP and
// port, or (kernel overlay mode) a unicast IP and port that must be the
// node's overlay address (CheckMetricsOverlay, once it is known).
func (c File) validMetricsAddr() error {
	ap, err := netip.ParseAddrPort(c.MetricsAddr)
	switch {
	case err != nil || ap.Port() == 0:
		return errors.New("must be IP:port with a port, e.g. 127.0.0.1:9464, or this node's overlay IP and a port")
	case ap.Addr().IsLoopback():
		return nil
	case c.OverlayMode == OverlayUserspace:
		return errors.New("must be a loopback IP in userspace overlay mode: the overlay address is not the kernel's")
	case !ap.Addr().IsGlobalUnicast():
		return errors.New("must be a loopback IP or this node's overlay IP")
	}
	return nil
}

// CheckMetricsOverlay refuses (codes.MetricsAddrRefused) a metrics_addr
// that is neither loopback nor this node's overlay address.
func (c File) CheckMetricsOverlay(overlay netip.Addr) error {
	ap, loopback, ok := c.MetricsListen()
	if !ok || loopback || ap.Addr() == overlay {
		return nil
	}
	return codes.Wrap(codes.MetricsAddrRefused, fmt.Errorf("metrics_addr %s is neither loopback nor this node's overlay address %s", ap, overlay))
}
