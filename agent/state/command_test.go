package state

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

func TestCommandRoundTrip(t *testing.T) {
	cmds := []Command{
		bootstrapCmd(),
		MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker), Actor: "uid:0"},
		admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"),
		SetNodeState{NodeID: "n-w1", State: NodeRemoved, At: t0, Actor: "uid:0"},
	}
	for _, s := range fullHistory(t) { // every command type
		cmds = append(cmds, s.cmd)
	}
	for _, c := range cmds {
		b, err := Encode(c)
		if err != nil {
			t.Fatalf("Encode(%T): %v", c, err)
		}
		if b[0] != byte(c.commandType()) {
			t.Fatalf("%T: type byte %d", c, b[0])
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("Decode(%T): %v", c, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip of %T:\n got %+v\nwant %+v", c, got, c)
		}
		again, _ := Encode(got)
		if !bytes.Equal(again, b) {
			t.Fatalf("%T: re-encoding differs", c)
		}
	}
}

func TestCommandPointerEncodes(t *testing.T) {
	c := SetNodeState{NodeID: "n", State: NodeLeft, At: time.Unix(1, 0).UTC()}
	a, _ := Encode(c)
	b, err := Encode(&c)
	if err != nil || !bytes.Equal(a, b) {
		t.Fatalf("Encode(&c) = %q, %v; want %q", b, err, a)
	}
	if _, err := Encode(nil); err == nil {
		t.Fatal("Encode(nil) succeeded")
	}
}

func TestDecodeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"type-zero", []byte{0, '{', '}'}},
		{"type-unknown", []byte{200, '{', '}'}},
		{"no-body", []byte{byte(typeBootstrap)}},
		{"bad-json", []byte{byte(typeMintToken), '{'}},
		{"wrong-shape", []byte("\x03[1,2,3]")},
		{"bad-hash", []byte(`` + "\x02" + `{"record":{"hash":"zz"}}`)},
		{"trailing", []byte("\x04{} {}")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Decode(tc.in)
			if err == nil {
				t.Fatalf("Decode(%q) = %+v, want an error", tc.in, c)
			}
			if codes.Of(err) != codes.Internal {
				t.Fatalf("code %q", codes.Of(err))
			}
			if r := New().Apply(rawLog(tc.in)); r == nil {
				t.Fatal("Apply of garbage returned nil")
			}
		})
	}
}

func TestEncodeRefusesUnencodable(t *testing.T) {
	c := SetNodeState{NodeID: "n", State: NodeLeft, At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}
	if b, err := Encode(c); err == nil {
		t.Fatalf("Encode of a year-10000 time = %q, want an error", b)
	}
}
