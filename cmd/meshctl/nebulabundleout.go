package main

import (
	"path"
	"strings"
	"time"

	"github.com/meshd/meshd/enroll"
	"github.com/meshd/meshd/nebulabundle"
)

func (a *app) printNebulaBundle(resp *enroll.NebulaResponse, f nebulaBundleFlags, files []string, run string) {
	what := "bundle"
	if f.renew {
		what = "renewed bundle"
	}
	a.out.Printf("%s of %s, a stock Nebula member of cluster %q (node id %s)\n", what, resp.Name, resp.ClusterName, resp.NodeID)
	a.out.Printf("overlay: %s\n", overlays(resp))
	if len(resp.Groups) > 0 {
		a.out.Printf("groups: %s\n", strings.Join(resp.Groups, ", "))
	}
	a.out.Printf("certificate expires: %s\n", resp.Expires.Local().Format(time.RFC3339))
	a.out.Printf("wrote %s: %s\n", f.out, strings.Join(files, ", "))
	if !f.generate {
		a.out.Printf("no %s written: config.yml names the device's own key, %s\n", nebulabundle.KeyFile, keyPath(f.pkiDir))
	}
	if f.renew {
		a.out.Printf("on the device: replace %s with the new one and restart nebula (or send it SIGHUP)\n", nebulabundle.CertFile)
	}
	if f.pkiDir != "" {
		a.out.Printf("on the device: copy the files into %s, then run:\n  %s\n", f.pkiDir, run)
	} else {
		a.out.Printf("on the device, with the files in one directory, run (config.yml names them relative to it):\n  %s\n", run)
	}
}

// shellQuote quotes s for a POSIX shell when it holds anything but
// letters, digits and /._-+,:@%=.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+,:@%=") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// keyPath is where config.yml looks for the device's private key.
func keyPath(pkiDir string) string {
	if pkiDir == "" {
		return nebulabundle.KeyFile + " in the directory nebula runs from"
	}
	return path.Join(pkiDir, nebulabundle.KeyFile)
}

// nebulaBundleJSON is nebula-bundle's -o json object.
func nebulaBundleJSON(resp *enroll.NebulaResponse, f nebulaBundleFlags, files []string, run string) map[string]any {
	out := map[string]any{
		"name": resp.Name, "node_id": resp.NodeID, "cluster": resp.ClusterName, "cluster_id": resp.ClusterID,
		"overlay_ip": resp.OverlayIP.String(), "expires": resp.Expires, "dir": f.out, "files": files,
		"key_generated": f.generate, "command": run,
	}
	if resp.OverlayIP6.IsValid() {
		out["overlay_ip6"] = resp.OverlayIP6.String()
	}
	if len(resp.Groups) > 0 {
		out["groups"] = resp.Groups
	}
	if f.renew {
		out["renew"] = true
	}
	if f.pkiDir != "" {
		out["pki_dir"] = f.pkiDir
	}
	lhs := make([]map[string]any, 0, len(resp.Lighthouses))
	for _, lh := range resp.Lighthouses {
		m := map[string]any{"name": lh.Name, "overlay": lh.Overlay.String(), "underlay": lh.Underlay}
		if lh.Overlay6.IsValid() {
			m["overlay6"] = lh.Overlay6.String()
		}
		lhs = append(lhs, m)
	}
	out["lighthouses"] = lhs
	return out
}
