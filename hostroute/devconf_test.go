package hostroute

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// linkAttrs builds the attributes of an RTM_NEWLINK answer: IFLA_MTU, then
// IFLA_AF_SPEC with an AF_INET6 entry and, when conf is not nil, an
// AF_INET entry whose IFLA_INET_CONF is conf.
func linkAttrs(conf []uint32) []byte {
	mtu := nl.NewRtAttr(unix.IFLA_MTU, nl.Uint32Attr(1500))
	spec := nl.NewRtAttr(unix.IFLA_AF_SPEC, nil)
	spec.AddRtAttr(unix.AF_INET6, nil).AddRtAttr(1, nl.Uint32Attr(7))
	if conf != nil {
		b := make([]byte, 4*len(conf))
		for i, v := range conf {
			binary.NativeEndian.PutUint32(b[4*i:], v)
		}
		spec.AddRtAttr(unix.AF_INET, nil).AddRtAttr(unix.IFLA_INET_CONF, b)
	}
	return append(mtu.Serialize(), spec.Serialize()...)
}

func TestForwardingFromLink(t *testing.T) {
	for name, c := range map[string]struct {
		attrs []byte
		want  uint32
		err   bool
	}{
		"ok/on":        {attrs: linkAttrs([]uint32{1, 0, 1}), want: 1},
		"ok/off":       {attrs: linkAttrs([]uint32{0, 1, 1}), want: 0},
		"fail/no-inet": {attrs: linkAttrs(nil), err: true},
		"fail/empty":   {attrs: linkAttrs([]uint32{}), err: true},
	} {
		got, err := forwardingFromLink(c.attrs)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("%s: forwardingFromLink = %d, %v; want %d, error %t", name, got, err, c.want, c.err)
		}
	}
	if _, err := forwardingFromLink(linkAttrs(nil)); !errors.Is(err, errNoInetConf) {
		t.Errorf("no AF_INET: %v, want errNoInetConf", err)
	}
}

// TestForwardingAttr pins the RTM_SETLINK attribute: IFLA_AF_SPEC, AF_INET,
// IFLA_INET_CONF, then attribute type IPV4_DEVCONF_FORWARDING (1) with the
// value as a native uint32.
func TestForwardingAttr(t *testing.T) {
	for _, v := range []uint32{0, 1} {
		conf, err := nested(forwardingAttr(v).Serialize(), unix.IFLA_AF_SPEC, unix.AF_INET, unix.IFLA_INET_CONF)
		if err != nil {
			t.Fatal(err)
		}
		attrs, err := nl.ParseRouteAttr(conf)
		if err != nil {
			t.Fatal(err)
		}
		if len(attrs) != 1 || attrs[0].Attr.Type != 1 || len(attrs[0].Value) != 4 || binary.NativeEndian.Uint32(attrs[0].Value) != v {
			t.Errorf("value %d: IFLA_INET_CONF holds %+v", v, attrs)
		}
	}
}
