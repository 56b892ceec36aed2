package raftnode_test

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/raftnode"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki/pkitest"
)

// TestCorruptSnapshotRefused: a raft snapshot whose state is truncated or
// garbled fails its size and CRC checks; with no snapshot left that
// restores, Open refuses with codes.StateCorrupt naming the snapshots dir
// rather than starting from a log that no longer reaches back to index 1.
func TestCorruptSnapshotRefused(t *testing.T) {
	for _, how := range []string{"truncated", "garbled"} {
		t.Run(how, func(t *testing.T) {
			ca := pkitest.NewCA(t, "alpha")
			dir := filepath.Join(t.TempDir(), "raft")
			n, addr := open(t, ca, "origin", dir)
			if err := n.Bootstrap(addr); err != nil {
				t.Fatal(err)
			}
			if err := n.WaitLeader(ctx(t, 10*time.Second)); err != nil {
				t.Fatal(err)
			}
			if err := n.Apply(ctx(t, 5*time.Second), bootstrapCmd()); err != nil {
				t.Fatal(err)
			}
			if err := n.TakeSnapshot(); err != nil {
				t.Fatalf("snapshot: %v", err)
			}
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
			states, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*", "state.bin"))
			if len(states) != 1 {
				t.Fatalf("want one snapshot, found %v", states)
			}
			b, err := os.ReadFile(states[0])
			if err != nil {
				t.Fatal(err)
			}
			if how == "truncated" {
				b = b[:len(b)/2]
			} else {
				b = bytes.Clone(b)
				for i := len(b) / 3; i < len(b)/3+8 && i < len(b); i++ {
					b[i] ^= 0x5a
				}
			}
			if err := os.WriteFile(states[0], b, 0o600); err != nil {
				t.Fatal(err)
			}

			server, client := controlTLS(t, ca, "origin")
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			a := ln.Addr()
			_ = ln.Close()
			stream, err := raftnode.NewTLSStreamLayer(a.String(), a, server, client)
			if err != nil {
				t.Fatal(err)
			}
			n2, err := raftnode.Open(raftnode.Options{Dir: dir, NodeID: "id-origin", Timing: fast, Stream: stream})
			if err == nil {
				_ = n2.Close()
				t.Fatalf("Open started from a %s snapshot", how)
			}
			if codes.Of(err) != codes.StateCorrupt || !strings.Contains(err.Error(), filepath.Join(dir, "snapshots")) {
				t.Fatalf("Open with a %s snapshot = %v, want %s naming %s", how, err, codes.StateCorrupt, filepath.Join(dir, "snapshots"))
			}
		})
	}
}
