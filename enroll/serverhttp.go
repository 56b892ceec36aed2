package enroll

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"time"

	"github.com/meshd/meshd/codes"
)

// ServeHTTP serves the enroll endpoints: POST Path with a JSON Request of
// at most 64 KiB, POST CheckPath with a CheckRequest, GET TimePath.
// Success is 200 with a JSON Response (CheckResponse, TimeResponse); a
// failure is an ErrorBody with its code's status. Errors without a code are
// answered as codes.Internal, without detail, and logged.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	method := http.MethodPost
	if r.URL.Path == TimePath {
		method = http.MethodGet
	}
	if r.URL.Path != Path && r.URL.Path != CheckPath && r.URL.Path != TimePath && r.URL.Path != NebulaPath {
		s.writeError(w, http.StatusNotFound, codes.Wrap(codes.EnrollRejected, fmt.Errorf("no endpoint %s", r.URL.Path)))
		return
	}
	if r.Method != method {
		w.Header().Set("Allow", method)
		s.writeError(w, http.StatusMethodNotAllowed, codes.Wrap(codes.EnrollRejected, fmt.Errorf("method %s, want %s", r.Method, method)))
		return
	}
	if r.URL.Path == TimePath {
		// The clock is no secret, and a joiner needs it before it sends
		// one: neither throttled nor logged.
		tr := TimeResponse{ServerTime: s.now(), STUNPort: s.cfg.STUNPort}
		if sr, ok := s.ledger.(SeedRevocations); ok {
			tr.Revocations, tr.RevokedSeeds = sr.SeedRevocations()
		}
		_ = writeJSON(w, tr)
		return
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		s.fail(w, "", fmt.Errorf("remote address %q: %w", r.RemoteAddr, err))
		return
	}
	source := ap.Addr().Unmap()
	if r.URL.Path == Path {
		defer s.observed(time.Now())(&err)
	}
	// A throttled source is answered before its body is read, and only its
	// first refusal is logged.
	if err = s.throttled(source); err != nil {
		s.writeError(w, codes.TokenThrottled.Status(), err)
		return
	}
	if (r.URL.Path == Path || r.URL.Path == NebulaPath) && s.unfit != nil {
		if why := s.unfit(); why != nil {
			err = codes.Wrap(codes.SeedUnfit, fmt.Errorf("this control node steps aside: %s", codes.OrInternal(why).Cause()))
			s.writeError(w, codes.SeedUnfit.Status(), err)
			return
		}
	}
	body := http.MaxBytesReader(w, r.Body, maxRequestBody)
	var (
		name string
		resp any
	)
	switch r.URL.Path {
	case CheckPath:
		var req CheckRequest
		if err = decodeJSON(body, &req); err == nil {
			name = req.Name
			resp, err = s.check(r.Context(), req, source)
		}
	case NebulaPath:
		var req NebulaRequest
		if err = decodeJSON(body, &req); err == nil {
			name = req.Name
			resp, err = s.nebulaMember(r.Context(), req, source)
		}
	default:
		var req Request
		if err = decodeJSON(body, &req); err == nil {
			name = req.Name
			resp, err = s.enroll(r.Context(), req, source, s.sessionCode(r, req))
		}
	}
	var pending errPending
	if errors.As(err, &pending) {
		// Not a failure: the join waits for an operator's approval.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		_ = json.NewEncoder(w).Encode(pending.ApprovalPending)
		return
	}
	if err != nil {
		s.count(source, err)
		s.fail(w, name, err) // name is empty if the request did not decode
		return
	}
	if err := writeJSON(w, resp); err != nil {
		s.log.Warn("write enroll response", "name", name, "path", r.URL.Path, "err", err)
	}
}

// sessionCode is the approval code of the TLS session r came over, for
// the token whose secret req carries; "" without TLS or keying material
// (approve then refuses an approval token).
func (s *Server) sessionCode(r *http.Request, req Request) string {
	if r.TLS == nil || req.Secret.IsZero() {
		return ""
	}
	code, err := SessionCode(*r.TLS, req.Secret.Hash())
	if err != nil {
		s.log.Warn("no approval code for this session", "err", err)
		return ""
	}
	return code
}

// writeJSON answers 200 with v.
func writeJSON(w http.ResponseWriter, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	return json.NewEncoder(w).Encode(v)
}

// decodeJSON reads one JSON document into v; anything malformed is
// codes.EnrollRejected. The error never quotes the body.
func decodeJSON(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return codes.Wrap(codes.EnrollRejected, fmt.Errorf("enroll request larger than %d bytes", tooBig.Limit))
		}
		if errors.Is(err, errBadSecret) {
			return codes.Wrap(codes.EnrollRejected, fmt.Errorf("enroll request: %w", errBadSecret))
		}
		return codes.Wrap(codes.EnrollRejected, errors.New("enroll request is not valid JSON"))
	}
	if dec.More() {
		return codes.Wrap(codes.EnrollRejected, errors.New("enroll request has trailing data"))
	}
	return nil
}

// fail logs err and answers it with its code's status.
func (s *Server) fail(w http.ResponseWriter, name string, err error) {
	code := codes.OrInternal(err)
	if codes.Of(err) == "" {
		s.log.Error("enroll failed", "code", code, "name", name, "err", err)
	} else {
		s.log.Warn("enroll refused", "code", code, "name", name, "err", err)
	}
	s.writeError(w, code.Status(), err)
}

// writeError writes err as an ErrorBody. Detail carries the message of a
// coded error only: an uncoded one may describe internals.
func (s *Server) writeError(w http.ResponseWriter, status int, err error) {
	code := codes.OrInternal(err)
	body := ErrorBody{Code: code.String(), Cause: code.Cause(), Remedy: code.Remedy()}
	if codes.Of(err) != "" {
		body.Detail = err.Error()
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
