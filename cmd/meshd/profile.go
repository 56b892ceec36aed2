package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
)

// Profiling for the benchmarks (docs/performance.md): with
// MESHD_CPUPROFILE=FILE meshd profiles its CPU from start to a clean exit;
// with MESHD_HEAPPROFILE=FILE it writes a heap profile (after a GC) when
// it exits cleanly; with MESHD_TRACE=FILE it writes Go's execution trace
// from start to a clean exit (what wakes an idle node: `go tool trace`,
// docs/performance.md). None is set by the packaged service. The files are
// written 0600, like everything else meshd writes.
type profiles struct {
	cpu   *os.File
	trace *os.File
	heap  string
}

// startProfiles starts what the environment asks for; a file that cannot
// be created is reported and profiling skipped, never fatal.
func startProfiles(stderr io.Writer) *profiles {
	p := &profiles{heap: os.Getenv("MESHD_HEAPPROFILE")}
	if path := os.Getenv("MESHD_TRACE"); path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
		if err == nil {
			if err = trace.Start(f); err != nil {
				_ = f.Close()
			}
		}
		if err != nil {
			fmt.Fprintf(stderr, "MESHD_TRACE: %v; not tracing\n", err)
		} else {
			p.trace = f
		}
	}
	if path := os.Getenv("MESHD_CPUPROFILE"); path != "" {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
		if err != nil {
			fmt.Fprintf(stderr, "MESHD_CPUPROFILE: %v; not profiling\n", err)
			return p
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "MESHD_CPUPROFILE: %v; not profiling\n", err)
			_ = f.Close()
			return p
		}
		p.cpu = f
	}
	return p
}

// stop writes what was asked for.
func (p *profiles) stop(stderr io.Writer) {
	if p.trace != nil {
		trace.Stop()
		_ = p.trace.Close()
	}
	if p.cpu != nil {
		pprof.StopCPUProfile()
		_ = p.cpu.Close()
	}
	if p.heap == "" {
		return
	}
	f, err := os.OpenFile(p.heap, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintf(stderr, "MESHD_HEAPPROFILE: %v\n", err)
		return
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		fmt.Fprintf(stderr, "MESHD_HEAPPROFILE: %v\n", err)
	}
}
