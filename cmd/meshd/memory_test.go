package main

import (
	"runtime/debug"
	"testing"
)

func TestTuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "")
	tuneGC()
	if got := debug.SetGCPercent(100); got != defaultGCPercent {
		t.Errorf("GOGC unset: GC percent %d, want %d", got, defaultGCPercent)
	}
	t.Setenv("GOGC", "200")
	debug.SetGCPercent(200) // as the runtime would have read it at start
	tuneGC()
	if got := debug.SetGCPercent(100); got != 200 {
		t.Errorf("GOGC=200: GC percent %d, want the operator's 200", got)
	}
}
