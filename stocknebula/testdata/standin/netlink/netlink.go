// Package netlink stands in for github.com/DefinedNet/netlink v1.3.2-dn.1,
// which the Go module proxy refuses, when stocknebula builds upstream
// Nebula v1.12 (PATCHES.md in third_party/nebula). It is
// github.com/vishvananda/netlink v1.3.1 under DefinedNet's import path:
// every name Nebula's overlay/tun_linux.go uses, and nothing else (the
// Android-only nicfinder file is not built for Linux).
package netlink

import vn "github.com/vishvananda/netlink"

type (
	Addr                  = vn.Addr
	Destination           = vn.Destination
	Link                  = vn.Link
	Route                 = vn.Route
	RouteSubscribeOptions = vn.RouteSubscribeOptions
	RouteUpdate           = vn.RouteUpdate
	Via                   = vn.Via
)

const FAMILY_ALL = vn.FAMILY_ALL

var (
	ErrDumpInterrupted = vn.ErrDumpInterrupted

	AddrDel                   = vn.AddrDel
	AddrList                  = vn.AddrList
	AddrReplace               = vn.AddrReplace
	LinkByName                = vn.LinkByName
	LinkSetIP6AddrGenMode     = vn.LinkSetIP6AddrGenMode
	RouteDel                  = vn.RouteDel
	RouteReplace              = vn.RouteReplace
	RouteSubscribeWithOptions = vn.RouteSubscribeWithOptions
)
