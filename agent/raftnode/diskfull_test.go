package raftnode

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"
)

// TestDiskFull: raft's log store error carries ENOSPC only as text.
func TestDiskFull(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"ok/wrapped", &fs.PathError{Op: "write", Path: "raft.db", Err: syscall.ENOSPC}, true},
		{"ok/quota", fmt.Errorf("x: %w", syscall.EDQUOT), true},
		{"ok/raft-text", fmt.Errorf("unable to store logs within log store, err: %q", "write /s/raft/raft.db: no space left on device"), true},
		{"fail/other", errors.New("leadership lost while committing log"), false},
		{"fail/eio", fmt.Errorf("x: %w", syscall.EIO), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := diskFull(tt.err); got != tt.want {
				t.Fatalf("diskFull(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
