package console

import (
	"strings"

	"github.com/meshd/meshd/agent/apitype"
)

// nodeNames maps node ids to node names, from the node list a page
// fetched (GET /v0/nodes). Some records carry a node's id where a reader
// wants its name: the audit trail's actor ("node:ID" of a joiner
// confirming its join, of the leader failing a stale one) and detail
// ("node ID confirmed its join"), a token's minter (the minting control
// node's id). The pages show the name there and keep the id in a title.
type nodeNames map[string]string

// namesOf is the id → name map of nodes; a node without either is left out.
func namesOf(nodes []apitype.Node) nodeNames {
	m := make(nodeNames, len(nodes))
	for _, n := range nodes {
		if n.ID != "" && n.Name != "" {
			m[n.ID] = n.Name
		}
	}
	return m
}

// part is a piece of a text as a page shows it: a node's name in place of
// its id (ID set; the page puts the id in a title), or text as it came.
type part struct {
	Text string
	ID   string
}

// parts is s with each word that is a known node's id replaced by that
// node's name. A word is a longest run of ASCII letters and digits, so
// the id in "node:ID", "ID," or "ID." is found, and a longer hex string
// that only begins with an id (a token's hash) is not. An id in
// parentheses right after its own name ("origin origin (ID)") is kept:
// the name is there already.
func (m nodeNames) parts(s string) []part {
	var out []part
	plain := 0 // s[plain:i] is text not yet added
	for i := 0; i < len(s); {
		if !wordByte(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && wordByte(s[j]) {
			j++
		}
		if name, ok := m[s[i:j]]; ok && !(strings.HasSuffix(s[:i], name+" (") && strings.HasPrefix(s[j:], ")")) {
			if plain < i {
				out = append(out, part{Text: s[plain:i]})
			}
			out = append(out, part{Text: name, ID: s[i:j]})
			plain = j
		}
		i = j
	}
	if plain < len(s) {
		out = append(out, part{Text: s[plain:]})
	}
	return out
}

// text is s as parts shows it, in plain text (what the audit filter also
// searches).
func (m nodeNames) text(s string) string {
	var b strings.Builder
	for _, p := range m.parts(s) {
		b.WriteString(p.Text)
	}
	return b.String()
}

func wordByte(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
