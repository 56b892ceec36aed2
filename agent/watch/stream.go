package watch

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
)

// MaxLine bounds one line of a stream: a full table of 10,000 node
// records is about 3 MB.
const MaxLine = 64 << 20

// ReadStream reads a stream of changes, one JSON line each, handing each
// to each with its size in bytes, until the stream ends (the read's
// error, io.EOF on a clean end), a line does not decode, or each fails.
func ReadStream(r io.Reader, each func(ch Change, size int) error) error {
	br := bufio.NewReaderSize(r, 4<<10)
	for {
		line, err := readLine(br)
		if err != nil {
			return err
		}
		var ch Change
		if err := json.Unmarshal(line, &ch); err != nil {
			return fmt.Errorf("a watch line that is not a change: %w", err)
		}
		if err := each(ch, len(line)); err != nil {
			return err
		}
	}
}

// readLine reads up to a newline, refusing a line past MaxLine.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > MaxLine {
			return nil, fmt.Errorf("a watch line past %d bytes", MaxLine)
		}
		switch err {
		case nil:
			return line, nil
		case bufio.ErrBufferFull:
			continue
		default:
			return nil, err
		}
	}
}
