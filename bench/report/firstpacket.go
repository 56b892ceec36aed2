package main

// Issue 54 item 3: mesh.BenchmarkFirstPacket, the first packet to a peer
// with no tunnel (Nebula's on-demand handshake with meshd's config, then
// one TCP echo; userspace device, UDP on loopback). Target: issue 54's
// "first packet to a peer with no tunnel (on-demand) ≤ 100 ms direct on
// this box", held by the slowest round.

const firstPacketBench = "BenchmarkFirstPacket"

var firstPacketRows = []row{
	{what: "first packet to a peer with no tunnel (on demand, direct): median", name: firstPacketBench, metric: "p50"},
	{what: "first packet to a peer with no tunnel (on demand, direct): 90th percentile", name: firstPacketBench, metric: "p90"},
	{what: "first packet to a peer with no tunnel (on demand, direct): slowest round", name: firstPacketBench, metric: "max",
		target: "≤ 100 ms", ok: le(100)},
}
