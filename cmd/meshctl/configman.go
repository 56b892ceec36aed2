package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// The meshd.yaml(5) manual page is generated from the commented config
// file the packages install as /etc/meshd/meshd.yaml
// (packaging/config/meshd.yaml): one source for both, so the page documents
// exactly the keys, defaults and words of the file. `meshctl gen-docs --man
// DIR --config-doc FILE` writes it at package build time; TestConfigManPage
// keeps cmd/meshctl/testdata/meshd.yaml.5 in step, and agent.TestConfigDocKeys
// that the file names every key meshd knows.
//
// The file's shape: a header comment (up to the first blank line), then
// groups of "# prose" lines followed by the keys they describe, each
// commented out with its default ("#key: default", nested keys indented by
// two spaces: "#  gossip: 7946"), an optional "  # note" after the value.

var (
	configKeyLine = regexp.MustCompile(`^#((?:  )*)([a-z][a-z0-9_]*):(?: (.*))?$`)
	trailingNote  = regexp.MustCompile(`^(.*?)\s+#\s+(.*)$`)
	backquoted    = regexp.MustCompile("`([^`]+)`")
	// configListItem is an item of a key's list default ("#    - {...}").
	configListItem = regexp.MustCompile(`^#(?:  )+- (.*)$`)
)

// preformatted starts a prose paragraph kept line by line (an example
// indented by three spaces or more in the file).
const preformatted = "\x00"

// configKey is one documented key: its dotted path, default and note.
type configKey struct{ path, value, note string }

// configGroup is prose and the keys it describes.
type configGroup struct {
	prose []string // paragraphs
	keys  []configKey
}

// parseConfigDoc splits the commented config into its header paragraphs
// and its groups. A line it does not recognise is an error, so the page
// cannot silently drop part of the file.
func parseConfigDoc(src []byte) (header []string, groups []configGroup, err error) {
	var (
		prose   []string // paragraphs of the prose being read
		cur     *configGroup
		parents []string // the enclosing keys of a nested key, by depth
		para    strings.Builder
		inHead  = true
	)
	flushPara := func() {
		if para.Len() > 0 {
			prose = append(prose, para.String())
			para.Reset()
		}
	}
	for n, line := range strings.Split(strings.TrimRight(string(src), "\n"), "\n") {
		line = strings.TrimRight(line, " \t")
		switch m := configKeyLine.FindStringSubmatch(line); {
		case line == "":
			flushPara()
			if inHead {
				header, prose, inHead = prose, nil, false
			}
			if len(prose) > 0 {
				return nil, nil, fmt.Errorf("line %d: prose with no key after it", n+1)
			}
			cur = nil
		case inHead && (line == "#" || strings.HasPrefix(line, "# ")):
			if line == "#" {
				flushPara()
				continue
			}
			if para.Len() > 0 {
				para.WriteByte(' ')
			}
			para.WriteString(strings.TrimPrefix(line, "# "))
		case m != nil && !inHead:
			flushPara()
			if cur == nil {
				groups = append(groups, configGroup{})
				cur = &groups[len(groups)-1]
			}
			cur.prose, prose = append(cur.prose, prose...), nil
			depth := len(m[1]) / 2
			if depth > len(parents) {
				return nil, nil, fmt.Errorf("line %d: %s is indented under no key", n+1, m[2])
			}
			parents = append(parents[:depth], m[2])
			k := configKey{path: strings.Join(parents, "."), value: m[3]}
			if t := trailingNote.FindStringSubmatch(k.value); t != nil {
				k.value, k.note = t[1], t[2]
			}
			cur.keys = append(cur.keys, k)
		case configListItem.MatchString(line) && cur != nil && len(cur.keys) > 0 && para.Len() == 0 && len(prose) == 0:
			// A list default, under the key above it: [a, b].
			k := &cur.keys[len(cur.keys)-1]
			item := configListItem.FindStringSubmatch(line)[1]
			if k.value == "" {
				k.value = "[" + item + "]"
			} else {
				k.value = strings.TrimSuffix(k.value, "]") + ", " + item + "]"
			}
		case strings.HasPrefix(line, "#   "):
			// An example in the prose, kept as written.
			if cur != nil && len(cur.keys) > 0 {
				cur = nil
			}
			if para.Len() > 0 && !strings.HasPrefix(para.String(), preformatted) {
				flushPara()
			}
			if para.Len() == 0 {
				para.WriteString(preformatted)
			} else {
				para.WriteByte('\n')
			}
			para.WriteString(strings.TrimPrefix(line, "#   "))
		case strings.HasPrefix(line, "# "):
			if strings.HasPrefix(para.String(), preformatted) {
				flushPara()
			}
			if cur != nil && len(cur.keys) > 0 {
				cur = nil // prose after keys starts the next group
			}
			if para.Len() > 0 {
				para.WriteByte(' ')
			}
			para.WriteString(strings.TrimPrefix(line, "# "))
		default:
			return nil, nil, fmt.Errorf("line %d: %q is neither prose (\"# ...\") nor a commented key (\"#key: default\")", n+1, line)
		}
	}
	flushPara()
	if len(prose) > 0 {
		return nil, nil, fmt.Errorf("the file ends with prose and no key")
	}
	return header, groups, nil
}

// roff escapes text for a roff line: backslashes, a leading dot or quote,
// hyphens; `code` becomes bold.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	s = backquoted.ReplaceAllString(s, `\fB$1\fR`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

// configManPage renders meshd.yaml(5) from the commented config file.
func configManPage(src []byte, date time.Time, source string) ([]byte, error) {
	header, groups, err := parseConfigDoc(src)
	if err != nil {
		return nil, fmt.Errorf("commented config: %w", err)
	}
	var b bytes.Buffer
	w := func(format string, args ...any) { b.WriteString(fmt.Sprintf(format, args...)) } // a file, not a terminal
	w(".TH \"MESHD.YAML\" \"5\" \"%s\" \"%s\" \"meshd manual\"\n", date.Format("Jan 2006"), roff(source))
	w(".nh\n.ad l\n")
	w(".SH NAME\nmeshd.yaml \\- configuration file of the meshd mesh agent\n")
	w(".SH SYNOPSIS\n\\fI/etc/meshd/meshd.yaml\\fR\n")
	w(".SH DESCRIPTION\n")
	for i, p := range header {
		if i > 0 {
			w(".PP\n")
		}
		w("%s\n", roff(p))
	}
	w(".PP\nThis page is generated from the commented file the packages install as \\fI/etc/meshd/meshd.yaml\\fR: " +
		"every key is listed below with its default, as it appears there commented out. " +
		"Nested keys are written with dots: \\fBports.gossip\\fR is \\fBgossip\\fR under \\fBports\\fR. " +
		"Durations are Go duration strings (\\fB500ms\\fR, \\fB30s\\fR, \\fB1h\\fR).\n")
	w(".SH KEYS\n")
	// Each group: its keys as stacked tags, each with its note, then the
	// group's prose as the body of the last one.
	for _, g := range groups {
		body := false
		for _, k := range g.keys {
			if k.value == "" && hasChildren(g.keys, k.path) {
				continue // a section such as ports: its keys follow
			}
			w(".TP\n\\fB%s\\fR", roff(k.path))
			if k.value != "" {
				w(" (default: \\fB%s\\fR)", roff(k.value))
			}
			w("\n")
			body = false
			if k.note != "" {
				w("%s\n", roff(strings.ToUpper(k.note[:1])+k.note[1:]+"."))
				body = true
			}
		}
		for _, p := range g.prose {
			if body {
				w(".IP\n")
			}
			if ex, ok := strings.CutPrefix(p, preformatted); ok {
				w(".nf\n")
				for _, l := range strings.Split(ex, "\n") {
					w("%s\n", roff(l))
				}
				w(".fi\n")
			} else {
				w("%s\n", roff(p))
			}
			body = true
		}
	}
	w(".SH FILES\n.TP\n\\fI/etc/meshd/meshd.yaml\\fR\n" +
		"The config file, a conffile: package upgrades keep the administrator's edits.\n" +
		".TP\n\\fI/usr/share/doc/meshd/\\fR\nThe operator's guide (operations.md), the error codes (errors.md) and the other documents.\n")
	w(".SH SEE ALSO\n\\fBmeshd\\fR(8), \\fBmeshctl\\fR(1), \\fBmeshctl\\-reload\\fR(1)\n")
	return b.Bytes(), nil
}

// hasChildren reports whether a key in keys is nested under path.
func hasChildren(keys []configKey, path string) bool {
	for _, k := range keys {
		if strings.HasPrefix(k.path, path+".") {
			return true
		}
	}
	return false
}

// genConfigMan writes meshd.yaml.5 into dir from the commented config file
// at src; nothing when src is empty.
func genConfigMan(dir, src string) error {
	if src == "" {
		return nil
	}
	raw, err := os.ReadFile(src)
	if err != nil {
		return usageError{fmt.Errorf("--config-doc: %w", err)}
	}
	date, err := docDate()
	if err != nil {
		return err
	}
	page, err := configManPage(raw, date, "meshd "+version)
	if err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	return os.WriteFile(filepath.Join(dir, "meshd.yaml.5"), page, 0o644)
}
