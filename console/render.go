package console

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

//go:embed assets
var assets embed.FS

// pageNames are the templates in assets/, each rendered inside layout.html.
var pageNames = []string{"mesh", "node", "admit", "admitted", "tokens", "approvals", "audit", "refused", "signedin"}

// problem is an error as every console page shows it: the code, its cause
// and remedy (meshd's words when meshd sent them), and the detail.
type problem struct {
	Code    codes.Code
	Cause   string
	Remedy  string
	Detail  string
	Details []string
}

// problemOf turns err into what the page shows, the way meshctl reports a
// failure (cmd/meshctl reportFor).
func problemOf(err error) *problem {
	if err == nil {
		return nil
	}
	c := codes.OrInternal(err)
	p := &problem{Code: c, Cause: c.Cause(), Remedy: c.Remedy()}
	var apiErr *apitype.Error
	if errors.As(err, &apiErr) {
		if apiErr.Cause != "" {
			p.Cause, p.Remedy = apiErr.Cause, apiErr.Remedy
		}
		p.Detail, p.Details = apiErr.Detail, apiErr.Details
		return p
	}
	if s := err.Error(); s != c.Cause() {
		p.Detail = strings.TrimPrefix(s, string(c)+": ")
	}
	return p
}

// view is what every page template gets.
type view struct {
	Title   string
	Nav     string // the page's entry in the navigation
	CSRF    string
	Problem *problem
	Notice  string
	Data    any
}

func parseTemplates() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"clean": clean,
		"when":  when,
		"join":  strings.Join,
	}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		return nil, err
	}
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(sub, "layout.html")
	if err != nil {
		return nil, err
	}
	ts := make(map[string]*template.Template, len(pageNames))
	for _, n := range pageNames {
		t, err := template.Must(layout.Clone()).ParseFS(sub, n+".html")
		if err != nil {
			return nil, fmt.Errorf("template %s: %w", n, err)
		}
		ts[n] = t
	}
	return ts, nil
}

// render writes page name with v, status code first; a template failure
// becomes a plain 500 (the page is rendered to a buffer first).
func (p *pages) render(w http.ResponseWriter, status int, name string, v view) {
	var b bytes.Buffer
	if err := p.templates[name].ExecuteTemplate(&b, "layout.html", v); err != nil {
		http.Error(w, string(codes.Internal)+": "+codes.Internal.Cause(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// renderFragment writes the block of page name alone, inside the element
// whose id is the block's name (the element console.js replaces).
func (p *pages) renderFragment(w http.ResponseWriter, name, block string, v view) {
	var b bytes.Buffer
	b.WriteString(`<div id="` + block + `">`)
	if err := p.templates[name].ExecuteTemplate(&b, block, v); err != nil {
		http.Error(w, string(codes.Internal)+": "+codes.Internal.Cause(), http.StatusInternalServerError)
		return
	}
	b.WriteString("</div>\n")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

// signedIn answers the request that carried the URL's secret: a page that
// moves on at once to target, the same page without the secret. It is a
// Refresh, not a 303: a refresh is a navigation by the console's own page,
// so the browser sends the SameSite=Strict cookie with it even when the URL
// was opened from another site's page (a link in a web chat), where a
// redirect would still count as that site's navigation and go without it.
func (p *pages) signedIn(w http.ResponseWriter, target string) {
	w.Header().Set("Refresh", "0; url="+target)
	p.render(w, http.StatusOK, "signedin", view{Title: "Signed in", Data: target})
}

// refuse answers a request the guard turned away: the code's HTTP status and
// a page with its code, cause and remedy, and no data of the cluster.
func (p *pages) refuse(w http.ResponseWriter, err error) {
	pr := problemOf(err)
	p.render(w, pr.Code.Status(), "refused", view{Title: "Refused", Problem: pr})
}

// clean replaces control and format characters (escape sequences, bidi
// overrides, zero-width characters) with U+FFFD, as meshctl's printer does:
// html/template escapes markup, this keeps a node's name from reordering or
// hiding text on the page.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return unicode.ReplacementChar
		}
		return r
	}, s)
}

// when formats a time for a page, "—" for the zero time.
func when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.Local().Format("2006-01-02 15:04:05 MST")
}
