package console

import (
	"math"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

var (
	tagRe  = regexp.MustCompile(`(?s)<(input|select|textarea|button|table|th|svg)\b([^>]*)>`)
	attrRe = regexp.MustCompile(`([a-z-]+)="([^"]*)"`)
)

func attrs(s string) map[string]string {
	m := map[string]string{}
	for _, a := range attrRe.FindAllStringSubmatch(s, -1) {
		m[a[1]] = a[2]
	}
	return m
}

// TestAccessibleMarkup: on every page, each form control has a label (a
// <label for> or aria-label), each button a name, each table a caption and
// scoped headers, the picture a role and a title, and the page a language.
// Screen reader and keyboard checks in a real browser are the browser
// tests' part.
func TestAccessibleMarkup(t *testing.T) {
	c := startConsole(t, newFake())
	c.login()
	pages := map[string]string{}
	for _, path := range []string{"/", "/node/w1", "/node/cp1", "/admit", "/tokens", "/approvals", "/audit?q=x"} {
		_, pages[path] = c.get(path)
	}
	_, pages["admitted"] = c.post("/admit", url.Values{"name": {"w7"}, "role": {"worker"}, "ttl": {"15m"}})
	_, pages["refused"], _ = c.do(c.request("GET", "/", nil))
	for path, body := range pages {
		if !strings.Contains(body, `<html lang="en">`) || !strings.Contains(body, "<title>") {
			t.Errorf("%s: no language or title", path)
		}
		for _, m := range tagRe.FindAllStringSubmatchIndex(body, -1) {
			tag, a := body[m[2]:m[3]], attrs(body[m[4]:m[5]])
			switch tag {
			case "input", "select", "textarea":
				if a["type"] == "hidden" {
					continue
				}
				if a["aria-label"] == "" && (a["id"] == "" || !strings.Contains(body, `<label for="`+a["id"]+`"`)) {
					t.Errorf("%s: <%s name=%q> has no label", path, tag, a["name"])
				}
			case "button":
				end := strings.Index(body[m[1]:], "</button>")
				if a["aria-label"] == "" && (end <= 0 || strings.TrimSpace(body[m[1]:m[1]+end]) == "") {
					t.Errorf("%s: a button without a name", path)
				}
			case "table":
				if !strings.HasPrefix(strings.TrimSpace(body[m[1]:]), "<caption>") {
					t.Errorf("%s: a table without a caption", path)
				}
			case "th":
				if a["scope"] == "" {
					t.Errorf("%s: <th> without scope", path)
				}
			case "svg":
				if a["role"] != "img" || a["aria-labelledby"] == "" || !strings.Contains(body, `<title id="`+a["aria-labelledby"]+`">`) {
					t.Errorf("%s: the picture has no role or title", path)
				}
			}
		}
	}
}

// TestContrast: every colour of the stylesheet's palette has a contrast of
// at least 4.5:1 on the white page (WCAG AA for text; the picture's fills
// and rings need 3:1 and get more).
func TestContrast(t *testing.T) {
	css, err := assets.ReadFile("assets/static/style.css")
	if err != nil {
		t.Fatal(err)
	}
	vars := regexp.MustCompile(`(--[a-z]+): (#[0-9a-f]{6});`).FindAllStringSubmatch(string(css), -1)
	if len(vars) < 8 {
		t.Fatalf("found %d colours in style.css", len(vars))
	}
	for _, v := range vars {
		if v[1] == "--line" { // the table rules: decoration, not content
			continue
		}
		if r := contrast(v[2], "#ffffff"); r < 4.5 {
			t.Errorf("%s %s on white: %.2f:1, want at least 4.5:1", v[1], v[2], r)
		}
	}
}

func contrast(a, b string) float64 {
	la, lb := luminance(a), luminance(b)
	return (math.Max(la, lb) + 0.05) / (math.Min(la, lb) + 0.05)
}

func luminance(hex string) float64 {
	var l [3]float64
	for i := range l {
		n, _ := strconv.ParseUint(hex[1+2*i:3+2*i], 16, 8)
		c := float64(n) / 255
		if c <= 0.04045 {
			l[i] = c / 12.92
		} else {
			l[i] = math.Pow((c+0.055)/1.055, 2.4)
		}
	}
	return 0.2126*l[0] + 0.7152*l[1] + 0.0722*l[2]
}
