package main

import (
	"strings"

	"github.com/meshd/meshd/agent/apitype"
)

// offloadsCell is status's offloads row (issue 53): those in use, and
// those the kernel or device refused; "none" when none is in use.
func offloadsCell(o *apitype.Overlay) string {
	v := strings.Join(o.Offloads, " ")
	if v == "" {
		v = "none"
	}
	if len(o.OffloadsRefused) > 0 {
		v += " (refused: " + strings.Join(o.OffloadsRefused, " ") + ")"
	}
	return v
}
