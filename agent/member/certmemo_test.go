package member

import "testing"

// TestPEMMemoWorksOutOncePerPEM: the same PEM (equal bytes, another
// slice) is worked out once; a changed one, or one more, again.
func TestPEMMemoWorksOutOncePerPEM(t *testing.T) {
	var m pemMemo[int]
	calls := 0
	f := func() int { calls++; return calls }
	a, b := []byte("-----BEGIN A-----"), []byte("-----BEGIN B-----")
	steps := []struct {
		in   [][]byte
		want int
	}{
		{[][]byte{a, b}, 1},
		{[][]byte{[]byte(string(a)), []byte(string(b))}, 1}, // equal bytes: kept
		{[][]byte{a, []byte("-----BEGIN C-----")}, 2},       // one renewed
		{[][]byte{a}, 3}, // fewer
		{[][]byte{a}, 3},
		{[][]byte{a, b}, 4},
	}
	for i, s := range steps {
		if got := m.get(f, s.in...); got != s.want {
			t.Fatalf("step %d: got %d, want %d", i, got, s.want)
		}
	}
	a[0] = 'x' // the caller's slice changed in place after the look: the memo kept its own copy
	if got := m.get(f, []byte("-----BEGIN A-----"), b); got != 4 {
		t.Fatalf("a caller's slice changed in place changed the memo: got %d, want 4", got)
	}
}
