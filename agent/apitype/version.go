package apitype

import (
	"runtime"
	"runtime/debug"
)

// PathVersion is GET /v0/version: the daemon's Build. A meshd older than
// this route answers 404, with its version still in the VersionHeader.
const PathVersion = "/v0/version"

// Build is what a meshd or meshctl binary says it is (`meshctl version`,
// `meshd version`).
type Build struct {
	Version string `json:"version"`
	Commit  string `json:"commit"`
	Go      string `json:"go"`
}

// NewBuild is the Build of this binary: version and commit as the linker
// set them (-X main.version, -X main.commit; the Makefile does), else what
// the Go toolchain recorded (runtime/debug.ReadBuildInfo: the module
// version and the VCS revision of a `go build` in a git checkout), else
// "dev" and "unknown".
func NewBuild(version, commit string) Build {
	b := Build{Version: version, Commit: commit, Go: runtime.Version()}
	if version == "dev" {
		b.Version = ""
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		b = fromBuildInfo(b, bi)
	}
	if b.Version == "" {
		b.Version = "dev"
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}

// fromBuildInfo fills what b lacks from the toolchain's record.
func fromBuildInfo(b Build, bi *debug.BuildInfo) Build {
	if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		b.Version = bi.Main.Version
	}
	if b.Commit != "" {
		return b
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "-dirty"
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" {
		b.Commit = rev + dirty
	}
	return b
}

// String is the one-line form: "v1.2.0 (commit 0123abcd4567, go1.26.8)".
func (b Build) String() string {
	return b.Version + " (commit " + b.Commit + ", " + b.Go + ")"
}

// Differs reports whether a and b are different builds: their versions
// differ, or both know their commit and the commits differ.
func (b Build) Differs(o Build) bool {
	if b.Version != o.Version {
		return true
	}
	known := func(c string) bool { return c != "" && c != "unknown" }
	return known(b.Commit) && known(o.Commit) && b.Commit != o.Commit
}
