//go:build race

package control

// raceEnabled reports a -race build (fastRaft).
const raceEnabled = true
