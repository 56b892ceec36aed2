package hostroute

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// ipv4DevconfForwarding is IPV4_DEVCONF_FORWARDING of linux/ip.h: inside
// IFLA_INET_CONF an attribute's type is the devconf index, and a dump's
// array holds index i at position i-1.
const ipv4DevconfForwarding = 1

// errNoInetConf: the kernel's answer for the interface holds no IPv4
// devconf (an interface with no IPv4 configuration at all).
var errNoInetConf = errors.New("no IPv4 configuration (IFLA_INET_CONF) in the kernel's answer")

// forwarding reads interface index's IPv4 forwarding value, what
// /proc/sys/net/ipv4/conf/IF/forwarding shows, from RTM_GETLINK.
func forwarding(index int) (uint32, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWLINK)
	if err != nil {
		return 0, err
	}
	if len(msgs) != 1 || len(msgs[0]) < unix.SizeofIfInfomsg {
		return 0, fmt.Errorf("RTM_GETLINK answered %d messages", len(msgs))
	}
	return forwardingFromLink(msgs[0][unix.SizeofIfInfomsg:])
}

// forwardingFromLink finds IPV4_DEVCONF_FORWARDING in the attributes of an
// RTM_NEWLINK message (what follows its ifinfomsg): IFLA_AF_SPEC, then
// AF_INET, then IFLA_INET_CONF, an array of native-endian uint32.
func forwardingFromLink(attrs []byte) (uint32, error) {
	conf, err := nested(attrs, unix.IFLA_AF_SPEC, unix.AF_INET, unix.IFLA_INET_CONF)
	if err != nil {
		return 0, err
	}
	at := 4 * (ipv4DevconfForwarding - 1)
	if len(conf) < at+4 {
		return 0, fmt.Errorf("IFLA_INET_CONF holds %d bytes, too few for FORWARDING", len(conf))
	}
	return binary.NativeEndian.Uint32(conf[at:]), nil
}

// nested returns the value of the attribute reached by following types
// through nested attributes, or errNoInetConf when one is missing.
func nested(b []byte, types ...uint16) ([]byte, error) {
	for _, typ := range types {
		attrs, err := nl.ParseRouteAttr(b)
		if err != nil {
			return nil, fmt.Errorf("parse link attributes: %w", err)
		}
		found := false
		for _, a := range attrs {
			if a.Attr.Type&^(unix.NLA_F_NESTED|unix.NLA_F_NET_BYTEORDER) == typ {
				b, found = a.Value, true
				break
			}
		}
		if !found {
			return nil, errNoInetConf
		}
	}
	return b, nil
}

// setForwarding sets interface index's IPv4 forwarding to value with
// RTM_SETLINK (IFLA_AF_SPEC, AF_INET, IFLA_INET_CONF,
// IPV4_DEVCONF_FORWARDING): what writing /proc/sys/net/ipv4/conf/IF/forwarding
// would do, without /proc/sys, which is read-only under meshd's unit.
func setForwarding(index int, value uint32) error {
	req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(index)
	req.AddData(msg)
	req.AddData(forwardingAttr(value))
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}

// forwardingAttr is the IFLA_AF_SPEC attribute that sets IPv4 forwarding.
func forwardingAttr(value uint32) *nl.RtAttr {
	spec := nl.NewRtAttr(unix.IFLA_AF_SPEC, nil)
	inet := spec.AddRtAttr(unix.AF_INET, nil)
	conf := inet.AddRtAttr(unix.IFLA_INET_CONF, nil)
	conf.AddRtAttr(ipv4DevconfForwarding, nl.Uint32Attr(value))
	return spec
}
