package config

import (
	"fmt"
	"strings"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/mesh"
)

// OffloadsLine is `meshd check-config`'s line on Nebula's offloads (issue 53): off,
// or asked for and which of them this kernel grants (mesh.ProbeOffloads,
// as Nebula would at start); `meshctl status` shows what the running
// overlay got.
func (c File) OffloadsLine() string {
	if !c.OverlayOffloads {
		return "overlay offloads: off (overlay_offloads: false)"
	}
	kernel := c.OverlayMode != OverlayUserspace
	o, err := mesh.ProbeOffloads(kernel)
	line := fmt.Sprintf("overlay offloads: asked for; this kernel grants: %s", orNone(o.InUse()))
	if refused := o.Refused(!kernel); len(refused) > 0 {
		line += fmt.Sprintf("; not: %s (the overlay runs without them; warning %s at start)", strings.Join(refused, " "), codes.OffloadRefused)
	}
	if err != nil {
		line += fmt.Sprintf("; %v", err)
	}
	return line
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, " ")
}
