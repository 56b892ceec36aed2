package watch

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// TestReadStream: lines become changes with their sizes, a line longer
// than the reader's buffer is read whole, the stream's end is io.EOF, a
// line that is not a change ends the read with an error, and so does the
// callback's own.
func TestReadStream(t *testing.T) {
	long := `{"index":3,"put":{"nodes":{"a":"` + strings.Repeat("x", 10000) + `"}}}`
	in := "{\"index\":1}\n{\"index\":2,\"full\":true}\n" + long + "\n"
	var got []Change
	var sizes []int
	err := ReadStream(strings.NewReader(in), func(ch Change, n int) error {
		got, sizes = append(got, ch), append(sizes, n)
		return nil
	})
	if !errors.Is(err, io.EOF) || len(got) != 3 || got[1].Index != 2 || !got[1].Full || len(got[2].Put["nodes"]["a"]) != 10002 {
		t.Fatalf("read %d changes (%+v), ended %v", len(got), got, err)
	}
	if sizes[0] != len("{\"index\":1}\n") || sizes[2] != len(long)+1 {
		t.Fatalf("sizes %v", sizes)
	}
	if err := ReadStream(strings.NewReader("{\"index\":1}\nnot json\n"), func(Change, int) error { return nil }); err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("a line that is not a change: %v", err)
	}
	stop := errors.New("stop")
	if err := ReadStream(strings.NewReader("{\"index\":1}\n"), func(Change, int) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("the callback's error: %v", err)
	}
}
