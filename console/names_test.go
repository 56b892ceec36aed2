package console

import (
	"slices"
	"testing"
)

// TestParts: each word that is a known node id becomes the node's name
// with the id kept; words are runs of letters and digits, so an id inside
// a longer word stays, and an id in parentheses right after its own name
// stays too.
func TestParts(t *testing.T) {
	m := nodeNames{idW1: "w1", idCP1: "cp1"}
	for _, tc := range []struct {
		name, in string
		want     []part
	}{
		{"empty", "", nil},
		{"no id", "uid=0@cp1 via cp1", []part{{Text: "uid=0@cp1 via cp1"}}},
		{"actor", "node:" + idW1, []part{{Text: "node:"}, {Text: "w1", ID: idW1}}},
		{"actor via", "node:" + idW1 + " via cp1", []part{{Text: "node:"}, {Text: "w1", ID: idW1}, {Text: " via cp1"}}},
		{"whole", idCP1, []part{{Text: "cp1", ID: idCP1}}},
		{"two", idW1 + "," + idCP1 + ".", []part{{Text: "w1", ID: idW1}, {Text: ","}, {Text: "cp1", ID: idCP1}, {Text: "."}}},
		{"inside a hash", "hash " + idW1 + "ab", []part{{Text: "hash " + idW1 + "ab"}}},
		{"upper case is another word", "node " + "C645E29D95C639AD125CAF2322F946F7", []part{{Text: "node C645E29D95C639AD125CAF2322F946F7"}}},
		{"after its name", "origin cp1 (" + idCP1 + ") at", []part{{Text: "origin cp1 (" + idCP1 + ") at"}}},
		{"after another name", "origin w1 (" + idCP1 + ")", []part{{Text: "origin w1 ("}, {Text: "cp1", ID: idCP1}, {Text: ")"}}},
		{"unknown", "node:ffffffffffffffffffffffffffffffff", []part{{Text: "node:ffffffffffffffffffffffffffffffff"}}},
		{"non-ASCII around", "é" + idW1 + "é", []part{{Text: "é"}, {Text: "w1", ID: idW1}, {Text: "é"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := m.parts(tc.in); !slices.Equal(got, tc.want) {
				t.Errorf("parts(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
	if got := m.text("node " + idW1 + " confirmed"); got != "node w1 confirmed" {
		t.Errorf("text: %q", got)
	}
}
