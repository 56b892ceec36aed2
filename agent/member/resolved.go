package member

import (
	"context"
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/names/resolved"
)

// Split DNS on the host (issue 30 item 2): with systemd-resolved running,
// the overlay's link routes ~CLUSTER.DOMAIN, and nothing else, to this
// node's DNS on its overlay address (package names/resolved, over D-Bus).
// The runtime keeps it so (resolvedEvery, or sooner while resolved does
// not know the link yet) and reverts it when it stops: on leave and on
// shutdown. Without resolved it changes nothing on the host; status says
// how to point a resolver at the names.

// resolvedEvery is how often the link is checked (resolved restarted, or
// someone changed the link); a check sets only what differs.
const resolvedEvery = 30 * time.Second

// resolvedRetryMax caps the backoff while the link cannot be configured
// yet (no zone before a worker's first node list, a device resolved does
// not know yet): 1 s doubling to 5 s.
const resolvedRetryMax = 5 * time.Second

// resolvedCall bounds one D-Bus exchange with resolved.
const resolvedCall = 5 * time.Second

// startResolved runs the link's upkeep when it applies: names served on
// the overlay address, kernel mode (userspace mode has no link of the
// host's), dns.resolved on.
func (rt *Runtime) startResolved() {
	d := rt.dns
	if d == nil || !rt.cfg.DNS.Resolved || rt.ov.meshBase.Userspace {
		return
	}
	overlay := net.JoinHostPort(rt.overlayAddr().String(), strconv.Itoa(rt.cfg.DNS.Port))
	d.mu.Lock()
	why, notServed := d.notServed[overlay]
	d.mu.Unlock()
	switch {
	case notServed:
		d.setResolved("not used: the names are not served on the overlay address ("+why+")", "", nil)
		return
	case rt.cfg.DNS.Port != 53:
		d.setResolved("not used: resolved asks port 53 and dns.port is "+strconv.Itoa(rt.cfg.DNS.Port), "", nil)
		return
	}
	d.setResolved("pending", "", nil)
	rt.Spawn(d.runResolved)
}

// runResolved keeps the link configured until ctx ends, then reverts it.
func (d *dnsNames) runResolved(ctx context.Context) {
	retry := time.Second
	for {
		wait := resolvedEvery
		if err := d.ensureLink(ctx); errors.Is(err, resolved.ErrLinkUnknown) {
			wait, retry = retry, min(2*retry, resolvedRetryMax) // resolved learns a new TUN device shortly after it appears
		} else {
			retry = time.Second
		}
		select {
		case <-ctx.Done():
			d.revertLink()
			return
		case <-d.firstZone:
		case <-time.After(wait):
		}
	}
}

// ensureLink configures the link once and records the outcome for status.
func (d *dnsNames) ensureLink(ctx context.Context) error {
	z := d.srv.Zone()
	if z == nil {
		d.setResolved("pending: no node list yet", "", nil)
		return resolved.ErrLinkUnknown
	}
	ifc, err := net.InterfaceByName(d.cfg.TunDevice)
	if err != nil {
		d.setResolved("pending: the overlay device "+d.cfg.TunDevice+" is not up yet", "", nil)
		return resolved.ErrLinkUnknown
	}
	link := resolved.Link{IfIndex: ifc.Index, IfName: ifc.Name, Server: d.overlayAddr(), Domain: z.Origin()}
	cctx, cancel := context.WithTimeout(ctx, resolvedCall)
	defer cancel()
	changed, err := resolved.Ensure(cctx, link)
	switch {
	case err == nil:
		if changed {
			d.log.Info("systemd-resolved routes the cluster's names here", "link", ifc.Name, "domain", "~"+z.Origin(),
				"server", link.Server)
		}
		d.setResolved(resolvedConfigured, ifc.Name, nil)
	case errors.Is(err, resolved.ErrNotRunning), errors.Is(err, resolved.ErrOtherNetNS):
		// Nothing of the host's to configure: no warning, the hint says what to do.
		d.setResolved("not used: "+err.Error(), "", nil)
	case errors.Is(err, resolved.ErrLinkUnknown):
		d.setResolved("pending: systemd-resolved does not know "+ifc.Name+" yet", "", nil)
	default:
		d.setResolved("refused: "+err.Error(), "", err)
	}
	return err
}

// revertLink takes back what ensureLink set (the runtime stops: leave or
// shutdown), within its own deadline since the loops' context is over.
func (d *dnsNames) revertLink() {
	d.mu.Lock()
	link := d.link
	d.mu.Unlock()
	if link == "" {
		return
	}
	ifc, err := net.InterfaceByName(link)
	if err != nil {
		return // the device is gone: resolved forgot the link with it
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolvedCall)
	defer cancel()
	if err := resolved.Revert(ctx, ifc.Index); err != nil {
		d.log.Warn("systemd-resolved link not reverted", "link", link, "err", err)
		return
	}
	d.setResolved(resolvedOff, "", nil)
	d.log.Info("systemd-resolved no longer routes the cluster's names here", "link", link)
}

// setResolved records resolved's state for status; warn, when set, is
// the refusal status warns about (ResolvedNotUsed).
func (d *dnsNames) setResolved(state, link string, warn error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if warn != nil && d.resolvedErr == nil {
		d.log.Warn("systemd-resolved does not route the cluster's names here", "code", codes.ResolvedNotUsed, "err", warn)
	}
	d.resolved, d.link, d.resolvedErr = state, link, warn
}
