// Copyright 2012 Google, Inc. All rights reserved.
// Copyright 2009-2011 Andreas Krennmair. All rights reserved.
//
// Use of this source code is governed by a BSD-style license
// that can be found in the LICENSE file in the root of the source
// tree.

// Package layers is the part of github.com/google/gopacket/layers v1.1.19
// that Nebula v1.11.0 uses: the IP protocol numbers and ICMPv6 type
// numbers its IPv6 firewall parser switches on (outside.go; icmp6.go).
// Nothing else is kept.
//
// Why meshd builds with this instead of the real package (go.mod's
// replace): importing gopacket/layers runs its init, which fills lookup
// tables of 65,536 entries each (EthernetTypeMetadata, PPPTypeMetadata,
// the error decoders, the TCP and UDP port tables): 6.4 MB of globals
// written at start plus a boxed decoder per entry on the heap, in every
// meshd, for tables nothing in meshd or Nebula reads. That was a fifth of
// an idle worker's resident memory (docs/performance.md). The values below
// are the IANA numbers, copied unchanged from v1.1.19's enums.go and icmp6.go;
// a Nebula upgrade that uses more of gopacket fails to build until this is
// revisited.
package layers

// IPProtocol is an IP protocol number (the IPv4 protocol field, the IPv6
// next header).
type IPProtocol uint8

// The protocol numbers gopacket v1.1.19 names.
const (
	IPProtocolIPv6HopByHop    IPProtocol = 0
	IPProtocolICMPv4          IPProtocol = 1
	IPProtocolIGMP            IPProtocol = 2
	IPProtocolIPv4            IPProtocol = 4
	IPProtocolTCP             IPProtocol = 6
	IPProtocolUDP             IPProtocol = 17
	IPProtocolRUDP            IPProtocol = 27
	IPProtocolIPv6            IPProtocol = 41
	IPProtocolIPv6Routing     IPProtocol = 43
	IPProtocolIPv6Fragment    IPProtocol = 44
	IPProtocolGRE             IPProtocol = 47
	IPProtocolESP             IPProtocol = 50
	IPProtocolAH              IPProtocol = 51
	IPProtocolICMPv6          IPProtocol = 58
	IPProtocolNoNextHeader    IPProtocol = 59
	IPProtocolIPv6Destination IPProtocol = 60
	IPProtocolOSPF            IPProtocol = 89
	IPProtocolIPIP            IPProtocol = 94
	IPProtocolEtherIP         IPProtocol = 97
	IPProtocolVRRP            IPProtocol = 112
	IPProtocolSCTP            IPProtocol = 132
	IPProtocolUDPLite         IPProtocol = 136
	IPProtocolMPLSInIP        IPProtocol = 137
)
