package nebula

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/slackhq/nebula/config"
)

// meshd patch 5 (PATCHES.md, "Apply a membership change without a
// reload"): a membership change touches four keys, static_host_map,
// lighthouse.hosts, relay.relays and pki.blocklist. A reload re-reads the
// whole config and finds what changed by marshalling every key, old and
// new, to YAML (config.C.HasChanged), and the lighthouse then rebuilds
// every static host: at 1,000 members that was a quarter of a control
// node's CPU in formation (meshd issue 54). ApplyConfigDelta applies the
// changed entries only, through the code a reload runs for these keys
// (LightHouse.loadStaticEntry, reloadLighthouses, reloadRelays;
// blocklistFingerprints), and writes them into the config's Settings, so
// that the next reload compares its config with what runs.

// ConfigDelta is a change of static_host_map, lighthouse.hosts,
// relay.relays and pki.blocklist.
type ConfigDelta struct {
	// StaticHosts sets static_host_map entries: an overlay address to its
	// underlay addresses ("ip:port", as the config writes them). An entry
	// with none is removed.
	StaticHosts map[netip.Addr][]string
	// Lighthouses replaces lighthouse.hosts when SetLighthouses is true.
	Lighthouses    []netip.Addr
	SetLighthouses bool
	// Relays replaces relay.relays when SetRelays is true.
	Relays    []netip.Addr
	SetRelays bool
	// Block adds fingerprints to pki.blocklist; Unblock takes them out.
	Block, Unblock []string
}

// ApplyConfigDelta applies d to the running instance and to c, the config
// it runs (the one nebula.Main was given), as a reload of c with d's
// values would apply these keys, in a reload's order (the blocklist, then
// the static hosts, the lighthouses and the relays). It refuses, changing
// nothing, a malformed fingerprint and a lighthouse that would have no
// static_host_map entry. A static host that fails to parse stops it
// part-way, as it stops a reload: the caller applies the entries as they
// were to go back.
func (c *Control) ApplyConfigDelta(cfg *config.C, d ConfigDelta) error {
	var err error
	cfg.Edit(func() { err = c.f.applyConfigDelta(cfg, d) })
	return err
}

func (f *Interface) applyConfigDelta(c *config.C, d ConfigDelta) error {
	if d.SetLighthouses {
		for _, lh := range d.Lighthouses {
			addrs, changed := d.StaticHosts[lh]
			if (changed && len(addrs) == 0) || (!changed && !f.lightHouse.IsStaticHost(lh)) {
				return fmt.Errorf("lighthouse %s does not have a static_host_map entry", lh)
			}
		}
	}
	if len(d.Block) > 0 || len(d.Unblock) > 0 {
		if err := f.pki.applyBlocklistDelta(c, d.Block, d.Unblock); err != nil {
			return err
		}
	}
	if len(d.StaticHosts) > 0 {
		if err := f.lightHouse.applyStaticDelta(c, d.StaticHosts); err != nil {
			return err
		}
	}
	if d.SetLighthouses {
		lhs := settingsMap(c.Settings, "lighthouse")
		before := lhs["hosts"]
		lhs["hosts"] = addrList(d.Lighthouses)
		if err := f.lightHouse.reloadLighthouses(c, false); err != nil {
			lhs["hosts"] = before
			return err
		}
	}
	if d.SetRelays {
		settingsMap(c.Settings, "relay")["relays"] = addrList(d.Relays)
		f.lightHouse.reloadRelays(c, false, nil)
	}
	return nil
}

// applyStaticDelta is the static_host_map part of LightHouse.reload for
// the entries in set only: each entry that was static loses the addresses
// we own for it, each entry still static is loaded again
// (loadStaticEntry), each entry no longer static drops its resolved
// hostnames, and the new static list replaces the old.
func (lh *LightHouse) applyStaticDelta(c *config.C, set map[netip.Addr][]string) error {
	cadence, err := getStaticMapCadence(c)
	if err != nil {
		return err
	}
	network, err := getStaticMapNetwork(c)
	if err != nil {
		return err
	}
	lookupTimeout, err := getStaticMapLookupTimeout(c)
	if err != nil {
		return err
	}
	ourselves := lh.certState().myVpnNetworks[0].Addr()
	old := *lh.staticList.Load() // only this changes it, under the reload lock: unchanged until change below
	lh.RLock()
	for vpnAddr := range set {
		if _, ok := old[vpnAddr]; !ok {
			continue
		}
		if am, ok := lh.addrMap[vpnAddr]; ok && am != nil {
			am.ResetForOwner(ourselves)
		}
	}
	lh.RUnlock()

	// The entries to add are collected apart and the set changed in one
	// step (staticHosts.change): upstream's reload builds a new set and
	// stores it in the old one's place.
	added := make(map[netip.Addr]struct{}, len(set))
	var removed []netip.Addr
	shm := settingsMap(c.Settings, "static_host_map")
	i := len(old)
	for vpnAddr, addrs := range set {
		k := vpnAddr.String()
		if len(addrs) == 0 {
			removed = append(removed, vpnAddr)
			delete(shm, k)
			continue
		}
		v := make([]any, len(addrs))
		for j, a := range addrs {
			v[j] = a
		}
		if err := lh.loadStaticEntry(i, cadence, network, lookupTimeout, k, v, added); err != nil {
			return err
		}
		shm[k] = v
		i++
	}

	lh.RLock()
	for _, vpnAddr := range removed {
		if _, was := old[vpnAddr]; !was {
			continue
		}
		if am, ok := lh.addrMap[vpnAddr]; ok && am != nil {
			am.ClearHostnameResults()
		}
	}
	lh.RUnlock()

	lh.staticList.change(added, removed)
	lh.l.Info("static_host_map has changed", "entries", len(set))
	return nil
}

// applyBlocklistDelta is the blocklist part of PKI.reloadCAPool: a copy of
// the running CA pool (the same CAs, not read again) with unblock taken
// out of its blocklist and block added (blocklistFingerprints), stored in
// its place. A malformed fingerprint refuses the whole change.
func (p *PKI) applyBlocklistDelta(c *config.C, block, unblock []string) error {
	pool := p.caPool.Load().CopyWithBlocklist()
	for _, raw := range unblock {
		pool.UnblocklistFingerprint(strings.ToLower(strings.TrimSpace(raw)))
	}
	if bad := blocklistFingerprints(pool, block); len(bad) > 0 {
		return fmt.Errorf("pki.blocklist entries are not hex certificate fingerprints: %s", strings.Join(bad, ", "))
	}
	p.caPool.Store(pool)

	pki := settingsMap(c.Settings, "pki")
	before, _ := pki["blocklist"].([]any)
	after := make([]any, 0, len(before)+len(block))
	for _, v := range before {
		if s, ok := v.(string); ok && (slices.Contains(unblock, s) || slices.Contains(block, s)) {
			continue
		}
		after = append(after, v)
	}
	for _, fp := range block {
		after = append(after, fp)
	}
	pki["blocklist"] = after
	p.l.Info("Blocklisted certificates", "fingerprintCount", pool.BlocklistLen())
	return nil
}

// settingsMap is the map at key k of settings, made when missing (a
// config without the section).
func settingsMap(settings map[string]any, k string) map[string]any {
	if m, ok := settings[k].(map[string]any); ok {
		return m
	}
	m := map[string]any{}
	settings[k] = m
	return m
}

// addrList is a list of addresses as a parsed config holds one.
func addrList(addrs []netip.Addr) []any {
	out := make([]any, len(addrs))
	for i, a := range addrs {
		out[i] = a.String()
	}
	return out
}
