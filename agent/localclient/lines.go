package localclient

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// readLines reads an answer of JSON lines (apitype.StreamLines) and hands
// each line to line until line says the stream is done, returning line's
// error. A stream that ends or breaks before that is an error with code
// cut (what names the stream in it); a line that does not decode is
// Internal.
func readLines[L any](body io.Reader, what string, cut codes.Code, line func(L) (done bool, err error)) error {
	r := bufio.NewReaderSize(body, 64<<10)
	for {
		raw, err := r.ReadBytes('\n')
		if err != nil {
			if errors.Is(err, io.EOF) && len(raw) == 0 {
				return apitype.NewError(cut, fmt.Errorf("%s stream ended without a result", what))
			}
			return apitype.NewError(cut, fmt.Errorf("%s stream broke: %v", what, err))
		}
		var l L
		if err := json.Unmarshal(raw, &l); err != nil {
			return apitype.NewError(codes.Internal, fmt.Errorf("bad %s stream line: %v", what, err))
		}
		if done, err := line(l); done || err != nil {
			return err
		}
	}
}
