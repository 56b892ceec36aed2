package statedir

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshd/meshd/codes"
)

// TestCheckMachine: the node.json of another machine is refused with
// ClonedIdentity, and so is one whose machine can no longer be told
// (machine-id gone); a state dir from before the hash was recorded gets
// this machine's, once; a machine without a machine-id records nothing
// and runs. The recorded value is a prefixed hash, never the id.
func TestCheckMachine(t *testing.T) {
	const idA, idB = "0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"
	write := func(dir, id string) string {
		p := filepath.Join(dir, "machine-id")
		if err := os.WriteFile(p, []byte(id+"\n"), 0o444); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hashA, err := MachineIDHash(write(t.TempDir(), idA))
	if err != nil || len(hashA) != 64 || strings.Contains(hashA, idA) {
		t.Fatalf("hash of A: %q, %v", hashA, err)
	}
	hashB, _ := MachineIDHash(write(t.TempDir(), idB))
	if hashA == hashB {
		t.Fatal("two machine-ids hash alike")
	}
	for _, tc := range []struct {
		name      string
		recorded  string
		id        string // "" : no machine-id file; "-": an empty one
		want      codes.Code
		wantSaved string // what node.json holds afterwards
	}{
		{"ok/same machine", hashA, idA, "", hashA},
		{"fail/another machine", hashA, idB, codes.ClonedIdentity, hashA},
		{"fail/machine-id gone", hashA, "", codes.ClonedIdentity, hashA},
		{"fail/machine-id emptied", hashA, "-", codes.ClonedIdentity, hashA},
		{"ok/before the hash: recorded now", "", idB, "", hashB},
		{"ok/no machine-id: nothing recorded", "", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "none")
			switch tc.id {
			case "":
			case "-":
				path = write(dir, "")
			default:
				path = write(dir, tc.id)
			}
			f := &Facts{NodeID: "n1", Name: "w1", MachineID: tc.recorded}
			if err := Save(dir, f); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			err := CheckMachine(dir, f, path, slog.New(slog.NewTextHandler(&logs, nil)))
			if codes.Of(err) != tc.want || (tc.want == "") != (err == nil) {
				t.Fatalf("CheckMachine: %v, want %q", err, tc.want)
			}
			saved, err := Load(dir)
			if err != nil || saved.MachineID != tc.wantSaved {
				t.Fatalf("node.json holds %q (%v), want %q", saved.MachineID, err, tc.wantSaved)
			}
			if strings.Contains(logs.String(), idA) || strings.Contains(logs.String(), idB) {
				t.Errorf("the raw machine-id reached the log:\n%s", logs.String())
			}
		})
	}
}
