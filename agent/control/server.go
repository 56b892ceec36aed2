package control

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Limits bound what one peer can hold of port 7300, which faces networks
// nobody here controls.
type Limits struct {
	// ConnsPerSource bounds the open connections from one address; one
	// past it is closed at once.
	ConnsPerSource int
	// Request bounds reading a whole request, headers and body: a body
	// trickled in a byte at a time is cut off.
	Request time.Duration
	// Answer bounds handling and answering one request; the longest is a
	// control node's raft join, which waits for its promotion.
	Answer time.Duration
	// Idle closes a kept-alive connection that sends nothing.
	Idle time.Duration
	// HeaderBytes bounds request headers (bodies are bounded where they
	// are decoded).
	HeaderBytes int
}

// DefaultLimits are port 7300's limits in production.
func DefaultLimits() Limits {
	return Limits{ConnsPerSource: 64, Request: 10 * time.Second, Answer: 60 * time.Second,
		Idle: 60 * time.Second, HeaderBytes: 16 << 10}
}

// Listen opens port 7300: TCP on bind, at most l.ConnsPerSource
// connections per source address, TLS with conf. A connection refused for
// the cap is logged to log (at most once a second).
func Listen(bind string, conf *tls.Config, l Limits, log *slog.Logger) (net.Listener, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	return tls.NewListener(&sourceLimit{Listener: ln, max: l.ConnsPerSource, open: map[string]int{}, log: log}, conf), nil
}

// NewServer is the HTTP server of port 7300 with l's timeouts and header
// limit.
func NewServer(h http.Handler, l Limits, log *slog.Logger) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: l.Request, ReadTimeout: l.Request,
		WriteTimeout: l.Answer, IdleTimeout: l.Idle, MaxHeaderBytes: l.HeaderBytes,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
}

// sourceLimit closes a new connection when its source already holds max.
type sourceLimit struct {
	net.Listener
	max    int
	log    *slog.Logger
	mu     sync.Mutex
	open   map[string]int
	logged time.Time // when a refusal was last logged
}

func (l *sourceLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := c.RemoteAddr().String()
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			src = a.IP.String()
		}
		l.mu.Lock()
		full := l.open[src] >= l.max
		if !full {
			l.open[src]++
		}
		say := full && l.log != nil && time.Since(l.logged) >= time.Second
		if say {
			l.logged = time.Now()
		}
		l.mu.Unlock()
		if full {
			_ = c.Close()
			if say {
				l.log.Warn("connection refused: its source holds as many connections as one source may", "source", src, "max", l.max)
			}
			continue
		}
		return &countedConn{Conn: c, release: func() { l.release(src) }}, nil
	}
}

func (l *sourceLimit) release(src string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[src]--; l.open[src] <= 0 {
		delete(l.open, src)
	}
}

// countedConn gives its source's slot back once, on the first Close.
type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
