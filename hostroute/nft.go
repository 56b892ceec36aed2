package hostroute

import (
	"cmp"
	"net"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The nftables objects meshd owns.
const (
	nftTable = "meshd"       // family ip
	nftChain = "postrouting" // type nat, hook postrouting, priority srcnat
)

// masq is one masquerade rule: overlay traffic to Prefix leaving by the
// interface named Egress. A Prefix of length 0 matches every destination.
type masq struct {
	Prefix netip.Prefix
	Egress string
}

// sortMasq sorts ms by prefix, then interface, and drops duplicates: the
// order the rules take in the chain.
func sortMasq(ms []masq) []masq {
	slices.SortFunc(ms, func(a, b masq) int {
		if c := a.Prefix.Addr().Compare(b.Prefix.Addr()); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Prefix.Bits(), b.Prefix.Bits()); c != 0 {
			return c
		}
		return cmp.Compare(a.Egress, b.Egress)
	})
	return slices.Compact(ms)
}

// exprs is m as nftables expressions:
// `ip saddr OVERLAY [ip daddr PREFIX] oifname EGRESS masquerade`.
func (m masq) exprs(overlay netip.Prefix) []expr.Any {
	e := prefixMatch(12, overlay) // saddr: offset 12 of the IPv4 header
	if m.Prefix.Bits() > 0 {
		e = append(e, prefixMatch(16, m.Prefix)...) // daddr: offset 16
	}
	return append(e,
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(m.Egress)},
		&expr.Masq{},
	)
}

// prefixMatch matches the IPv4 address at offset of the network header
// against p, as nft compiles `ip saddr|daddr P`: a /32 is compared whole,
// a shorter prefix masked first.
func prefixMatch(offset uint32, p netip.Prefix) []expr.Any {
	p = p.Masked()
	addr := p.Addr().As4()
	e := []expr.Any{&expr.Payload{
		DestRegister: 1,
		Base:         expr.PayloadBaseNetworkHeader,
		Offset:       offset,
		Len:          4,
	}}
	if p.Bits() < 32 {
		e = append(e, &expr.Bitwise{
			SourceRegister: 1,
			DestRegister:   1,
			Len:            4,
			Mask:           net.CIDRMask(p.Bits(), 32),
			Xor:            make([]byte, 4),
		})
	}
	return append(e, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: addr[:]})
}

// ifname is an interface name as the kernel compares it: IFNAMSIZ bytes,
// NUL-padded.
func ifname(name string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return b
}

// replaceTable makes table ip meshd hold exactly the rules ms, in one
// nftables transaction: the table is added (a no-op when it exists),
// deleted and built again, so the kernel switches from the old rules to
// the new at once, or, on an error, keeps the old.
func replaceTable(overlay netip.Prefix, ms []masq) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	t := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: nftTable}
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	ch := c.AddChain(&nftables.Chain{
		Name:     nftChain,
		Table:    t,
		Type:     nftables.ChainTypeNAT,
		Hooknum:  nftables.ChainHookPostrouting,
		Priority: nftables.ChainPriorityNATSource,
	})
	for _, m := range ms {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: m.exprs(overlay)})
	}
	return c.Flush()
}

// deleteTable deletes table ip meshd if it exists, in one transaction
// (added first, so a missing table is no error).
func deleteTable() error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	t := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: nftTable}
	c.AddTable(t)
	c.DelTable(t)
	return c.Flush()
}
