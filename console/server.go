package console

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/meshd/meshd/agent/localclient"
	"github.com/meshd/meshd/codes"
)

// DefaultAddr is where the console listens unless told otherwise: a free
// port on 127.0.0.1.
const DefaultAddr = "127.0.0.1:0"

// Server is one run of the console: a bound loopback listener, the one-time
// secret of its URL and at most one browser session.
type Server struct {
	ln     net.Listener
	origin string // "http://" + the bound host:port, the only Host and Origin accepted
	host   string // the bound host:port, as the Host header must carry it
	guard  *guard
	pages  *pages
}

// Listen checks that addr is a loopback address (codes.ConsoleAddr
// otherwise), binds it and makes the one-time secret. The caller runs the
// server with Run and prints URL.
func Listen(addr string, client *localclient.Client) (*Server, error) {
	host, err := CheckAddr(addr)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", host)
	if err != nil {
		return nil, codes.Wrap(codes.ConsoleAddr, fmt.Errorf("--addr %s: %w", addr, err))
	}
	s, err := newServer(ln.Addr().String(), client)
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	s.ln = ln
	return s, nil
}

// newServer builds the server for the bound address host:port.
func newServer(bound string, client *localclient.Client) (*Server, error) {
	secret, err := randomToken()
	if err != nil {
		return nil, err
	}
	s := &Server{host: bound, origin: "http://" + bound}
	_, port, err := net.SplitHostPort(bound)
	if err != nil {
		return nil, err
	}
	s.guard = &guard{host: bound, origin: s.origin, cookie: cookiePrefix + port, secret: secret}
	s.pages, err = newPages(client)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// CheckAddr returns addr as the host:port to bind, or codes.ConsoleAddr when
// its host is not a loopback IP (or "localhost", bound as 127.0.0.1) or it
// has no port. An empty host (":8080", every interface) is refused.
func CheckAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", codes.Wrap(codes.ConsoleAddr, fmt.Errorf("--addr %q: %w", addr, err))
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return "", codes.Wrap(codes.ConsoleAddr, fmt.Errorf("--addr %q: %q is not a loopback IP", addr, host))
	}
	if _, err := net.LookupPort("tcp", port); err != nil || port == "" {
		return "", codes.Wrap(codes.ConsoleAddr, fmt.Errorf("--addr %q: bad port", addr))
	}
	return net.JoinHostPort(ip.String(), port), nil
}

// Addr is the bound host:port.
func (s *Server) Addr() string { return s.host }

// URL is the address to open: the console's origin with the one-time
// secret. Print it once; it works for the first browser that opens it.
func (s *Server) URL() string {
	return s.origin + "/?" + url.Values{"token": {s.guard.secret}}.Encode()
}

// Handler is the console: every route behind the guard.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	s.pages.routes(mux)
	return s.guard.wrap(mux, s.pages)
}

// Run serves until ctx ends, then shuts down within 2 s. It returns nil
// after a shutdown by ctx.
func (s *Server) Run(ctx context.Context) error {
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(s.ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(shut)
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// randomToken is 32 bytes from crypto/rand, base64url without padding.
func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
