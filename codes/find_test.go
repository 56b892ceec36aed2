package codes

import (
	"slices"
	"testing"
)

func TestFind(t *testing.T) {
	tests := []struct {
		in   string
		want []Code
	}{
		{"X401004TKNCNS", []Code{TokenConsumed}},
		{" x401004tkncns\n", []Code{TokenConsumed}},
		{"TKNCNS", []Code{TokenConsumed}},
		{"tkncns", []Code{TokenConsumed}},
		{"X401004", []Code{TokenConsumed}},
		{"401004", []Code{TokenConsumed}},
		{"401004TKN", []Code{TokenConsumed}},
		{"X503302", []Code{DaemonUnreachable}},
		{"TKNCN", []Code{TokenConsumed}},
		{"TKNC", []Code{TokenCorrupt, TokenConsumed}},
		{"X40300", []Code{TokenWrongAddr, TokenNameDiffer}},
		{"NOPENO", nil},
		{"X9", nil},
		{"", nil},
		{"XTKNCNS", nil},
	}
	for _, tt := range tests {
		if got := Find(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("Find(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
	// Every code is found whole, by its mnemonic and by its number.
	for _, c := range All() {
		for _, in := range []string{string(c), string(c[7:]), string(c[:7]), string(c[1:7])} {
			if got := Find(in); !slices.Equal(got, []Code{c}) {
				t.Errorf("Find(%q) = %v, want %s", in, got, c)
			}
		}
	}
	// Text naming many codes returns them all.
	if got := Find("TKN"); len(got) < 10 {
		t.Errorf("Find(TKN) = %v, want every token code", got)
	}
}
