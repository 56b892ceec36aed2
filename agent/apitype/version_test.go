package apitype

import (
	"runtime/debug"
	"testing"
)

// Without -ldflags, the version and commit come from the toolchain's
// record; what the linker set wins.
func TestFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{Main: debug.Module{Version: "v1.5.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"}, {Key: "vcs.modified", Value: "true"}}}
	devel := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}
	tests := []struct {
		name string
		in   Build
		bi   *debug.BuildInfo
		want Build
	}{
		{"ldflags-win", Build{Version: "1.4.0", Commit: "feedfacecafe"}, bi, Build{Version: "1.4.0", Commit: "feedfacecafe"}},
		{"from-buildinfo", Build{}, bi, Build{Version: "v1.5.0", Commit: "0123456789ab-dirty"}},
		{"devel-has-no-version", Build{}, devel, Build{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fromBuildInfo(tt.in, tt.bi); got != tt.want {
				t.Fatalf("fromBuildInfo = %+v, want %+v", got, tt.want)
			}
		})
	}
	if b := NewBuild("dev", ""); b.Version == "" || b.Commit == "" || b.Go == "" {
		t.Fatalf("NewBuild = %+v: every field set", b)
	}
}

func TestBuildDiffers(t *testing.T) {
	a := Build{Version: "1.4.0", Commit: "0123abcd4567", Go: "go1.26.8"}
	for _, tt := range []struct {
		b    Build
		want bool
	}{
		{a, false},
		{Build{Version: "1.4.0", Commit: "0123abcd4567", Go: "go1.26.1"}, false}, // another toolchain alone is the same release
		{Build{Version: "1.4.0", Commit: "unknown"}, false},                      // an old meshd names no commit
		{Build{Version: "1.4.0", Commit: "89ab01234567"}, true},
		{Build{Version: "1.3.0", Commit: "0123abcd4567"}, true},
	} {
		if got := a.Differs(tt.b); got != tt.want {
			t.Errorf("%+v.Differs(%+v) = %v, want %v", a, tt.b, got, tt.want)
		}
	}
}
