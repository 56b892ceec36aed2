//go:build !race

package member

// simRace reports a -race build (scalesim_race_test.go).
const simRace = false
