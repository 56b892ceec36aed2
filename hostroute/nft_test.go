package hostroute

import (
	"bytes"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/google/nftables/expr"
)

func TestSortMasq(t *testing.T) {
	p := netip.MustParsePrefix
	got := sortMasq([]masq{
		{p("192.168.50.0/24"), "lan1"},
		{p("0.0.0.0/0"), "wan0"},
		{p("192.168.50.0/24"), "lan0"},
		{p("10.0.0.0/8"), "lan0"},
		{p("192.168.50.0/25"), "lan0"},
		{p("192.168.50.0/24"), "lan0"},
	})
	want := []masq{
		{p("0.0.0.0/0"), "wan0"},
		{p("10.0.0.0/8"), "lan0"},
		{p("192.168.50.0/24"), "lan0"},
		{p("192.168.50.0/24"), "lan1"},
		{p("192.168.50.0/25"), "lan0"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("sortMasq = %v, want %v", got, want)
	}
}

// TestMasqExprs pins the expressions of each rule shape to what nft
// compiles `ip saddr … ip daddr … oifname … masquerade` to.
func TestMasqExprs(t *testing.T) {
	overlay := netip.MustParsePrefix("10.42.0.0/16")
	saddr := []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 255, 0, 0}, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{10, 42, 0, 0}},
	}
	oif := func(name string) []expr.Any {
		b := make([]byte, 16)
		copy(b, name)
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b},
			&expr.Masq{},
		}
	}
	for name, c := range map[string]struct {
		m    masq
		want []expr.Any
	}{
		"subnet": {
			masq{netip.MustParsePrefix("192.168.50.0/24"), "lan0"},
			slices.Concat(saddr, []expr.Any{
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte{255, 255, 255, 0}, Xor: []byte{0, 0, 0, 0}},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{192, 168, 50, 0}},
			}, oif("lan0")),
		},
		"host": {
			masq{netip.MustParsePrefix("192.168.50.7/32"), "lan0"},
			slices.Concat(saddr, []expr.Any{
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{192, 168, 50, 7}},
			}, oif("lan0")),
		},
		"exit": {
			masq{netip.MustParsePrefix("0.0.0.0/0"), "wan0"},
			slices.Concat(saddr, oif("wan0")),
		},
	} {
		if got := c.m.exprs(overlay); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: exprs =\n%#v\nwant\n%#v", name, got, c.want)
		}
	}
}

func TestIfname(t *testing.T) {
	if got := ifname("meshd0"); !bytes.Equal(got, []byte("meshd0\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")) {
		t.Errorf("ifname = %q", got)
	}
}
