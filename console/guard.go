package console

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/meshd/meshd/codes"
)

// cookiePrefix names the session cookie, followed by the bound port:
// cookies are kept per host, not per port, so two consoles on 127.0.0.1 (two
// clusters, or another user's) would otherwise overwrite each other's
// session. HttpOnly, SameSite=Strict, Path=/, no expiry (it ends with the
// browser session, and is worthless once meshctl ui stops).
const cookiePrefix = "meshctl_ui_"

// maxForm bounds a POST body.
const maxForm = 64 << 10

// guard admits a request only from the browser that exchanged the URL's
// one-time secret for the session cookie, at the bound Host, and a POST only
// with the session's CSRF token from the console's own origin.
type guard struct {
	host, origin string
	cookie       string // the session cookie's name
	secret       string // the URL's; exchanged once

	mu      sync.Mutex
	used    bool   // the secret was exchanged: it opens nothing more
	session string // the cookie's value; empty before the exchange
	csrf    string // the session's CSRF token, in every form
}

type csrfKey struct{}

// csrfOf is the session's CSRF token, for the forms of a page.
func csrfOf(ctx context.Context) string {
	s, _ := ctx.Value(csrfKey{}).(string)
	return s
}

// securityHeaders go on every answer: nothing may frame, embed or cache a
// page, and a page may load only the console's own stylesheet and script
// (no inline script, no eval) and fetch only from the console.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}

func (g *guard) wrap(next http.Handler, p *pages) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w.Header())
		if r.Host != g.host {
			// DNS rebinding: a name that resolves to 127.0.0.1 carries
			// its own Host; only the bound address is this console.
			p.refuse(w, codes.Wrap(codes.ConsoleHost, fmt.Errorf("Host %q, want %q", r.Host, g.host)))
			return
		}
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/static/") {
			next.ServeHTTP(w, r) // the stylesheet, also for a refusal's page
			return
		}
		csrf, ok := g.sessionOf(r)
		if q := r.URL.Query(); q.Has("token") {
			if !ok {
				if csrf, ok = g.exchange(w, q.Get("token")); !ok {
					p.refuse(w, codes.Wrap(codes.ConsoleSecret, fmt.Errorf("the URL's secret is wrong or was used already")))
					return
				}
			}
			p.signedIn(w, localTarget(r.URL.Path, q))
			return
		}
		if !ok {
			p.refuse(w, codes.Wrap(codes.ConsoleSecret, fmt.Errorf("no session cookie")))
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if err := g.checkOrigin(r); err != nil {
				p.refuse(w, err)
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, maxForm)
			if err := r.ParseForm(); err != nil {
				p.refuse(w, codes.Wrap(codes.ConsoleForm, fmt.Errorf("form: %w", err)))
				return
			}
			if sent := r.PostForm.Get("csrf"); sent == "" || subtle.ConstantTimeCompare([]byte(sent), []byte(csrf)) != 1 {
				p.refuse(w, codes.Wrap(codes.ConsoleCSRF, nil))
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), csrfKey{}, csrf)))
	})
}

// localTarget is the page to go on to after the secret: the same path and
// query without the secret, and "/" for a path a browser could read as
// another host: "//evil.example", "/\\evil.example", and any path holding
// a backslash or a control character anywhere (browsers drop tab, CR and
// LF from a URL, so "/\t/evil.example" becomes "//evil.example": issue 27
// item 9).
func localTarget(path string, q url.Values) string {
	q.Del("token")
	if !strings.HasPrefix(path, "/") || strings.HasPrefix(path, "//") ||
		strings.ContainsFunc(path, func(r rune) bool { return r == '\\' || r < 0x20 || r == 0x7f }) {
		path = "/"
	}
	if len(q) > 0 {
		return path + "?" + q.Encode()
	}
	return path
}

// sessionOf returns the session's CSRF token when r carries the session
// cookie.
func (g *guard) sessionOf(r *http.Request) (string, bool) {
	c, err := r.Cookie(g.cookie)
	if err != nil {
		return "", false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.session == "" || subtle.ConstantTimeCompare([]byte(c.Value), []byte(g.session)) != 1 {
		return "", false
	}
	return g.csrf, true
}

// exchange trades the one-time secret for the session: the first request
// with the right secret gets the cookie, every later one nothing.
func (g *guard) exchange(w http.ResponseWriter, secret string) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.used || subtle.ConstantTimeCompare([]byte(secret), []byte(g.secret)) != 1 {
		return "", false
	}
	session, err := randomToken()
	if err != nil {
		return "", false
	}
	csrf, err := randomToken()
	if err != nil {
		return "", false
	}
	g.used, g.session, g.csrf = true, session, csrf
	http.SetCookie(w, &http.Cookie{Name: g.cookie, Value: session, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	return csrf, true
}

// checkOrigin refuses a state-changing request that does not come from the
// console's own pages: its Origin, or without one its Referer, must be the
// console's origin; a request with neither is refused.
func (g *guard) checkOrigin(r *http.Request) error {
	if o := r.Header.Get("Origin"); o != "" {
		if o != g.origin {
			return codes.Wrap(codes.ConsoleOrigin, fmt.Errorf("Origin %q", o))
		}
		return nil
	}
	ref := r.Header.Get("Referer")
	if ref == "" {
		return codes.Wrap(codes.ConsoleOrigin, fmt.Errorf("no Origin and no Referer"))
	}
	if u, err := url.Parse(ref); err != nil || !strings.HasPrefix(ref, g.origin+"/") || u.Host != g.host {
		return codes.Wrap(codes.ConsoleOrigin, fmt.Errorf("Referer from another origin"))
	}
	return nil
}
