//go:build race

package gossip

// raceEnabled reports a -race build: see TestGossipSim.
const raceEnabled = true
