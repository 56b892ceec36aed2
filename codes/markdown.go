package codes

import (
	"fmt"
	"strings"
)

// Markdown renders the code table as docs/errors.md. A test keeps the file
// in step with the table.
func Markdown() string {
	var b strings.Builder
	b.WriteString("# meshd error and event codes\n\n")
	b.WriteString("Generated from `codes/table.go` (`go test ./codes -update`); do not edit by hand.\n")
	b.WriteString("Every failure prints its code first (`CODE: cause`), then a remedy line; ")
	b.WriteString("`meshctl explain CODE` prints the same text offline. Codes with a 2xx status are warnings.\n\n")
	b.WriteString("| code | status | cause | remedy |\n|---|---|---|---|\n")
	for _, c := range All() {
		i := table[c]
		fmt.Fprintf(&b, "| `%s` | %d | %s | %s |\n", c, i.Status, escape(i.Cause), escape(i.Remedy))
	}
	return b.String()
}

func escape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
