package main

import (
	"fmt"
	"strings"

	"github.com/meshd/meshd/agent/apitype"
)

// silentCell is a lighthouse's members whose host updates stopped
// (apitype.Overlay.Silent), longest silent first: "w3 (42 s), w4 (31 s)
// of 12 heard"; "" on a worker or when none is silent.
func silentCell(o *apitype.Overlay) string {
	if len(o.Silent) == 0 {
		return ""
	}
	parts := make([]string, 0, len(o.Silent))
	for _, m := range o.Silent {
		parts = append(parts, fmt.Sprintf("%s (%d s)", m.Name, m.SilentSeconds))
	}
	more := ""
	if o.SilentMore {
		more = " and more"
	}
	return fmt.Sprintf("%s%s, of %d members heard", strings.Join(parts, ", "), more, o.Heard)
}
