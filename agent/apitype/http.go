package apitype

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/meshd/meshd/codes"
)

// WriteJSON sends v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError sends the coded error with the code's HTTP status.
func WriteError(w http.ResponseWriter, err error) {
	c := codes.OrInternal(err)
	WriteJSON(w, c.Status(), NewError(c, err))
}

// DecodeBody reads a JSON request body of at most 64 KiB, refusing unknown
// fields (codes.BadRequest).
func DecodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return codes.Wrap(codes.BadRequest, fmt.Errorf("request body: %w", err))
	}
	return nil
}

// StreamLines starts an answer of JSON lines (a join's steps, a plan's
// checks) and returns the function that sends one line, flushed at once so
// the caller sees it as it happens.
func StreamLines[L any](w http.ResponseWriter) func(L) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	return func(l L) {
		_ = enc.Encode(l)
		if flusher != nil {
			flusher.Flush()
		}
	}
}
