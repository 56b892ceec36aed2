package config

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/mesh"
	"github.com/meshd/meshd/pki"
)

// TestMeshKeys: every mesh.Config field MeshKey names a key for is set by
// MeshBase from that key: changing the key's value changes the field, for
// a worker and a control node alike. A field MeshKey names no key for
// moves with none of these keys.
func TestMeshKeys(t *testing.T) {
	base := Default()
	base.OverlayMode, base.Timers = OverlayKernel, TimersLAN
	edits := map[string]func(*File){
		"bind_addr":         func(c *File) { c.BindAddr = "192.0.2.7" },
		"ports.nebula":      func(c *File) { c.Ports.Nebula = 4343 },
		"tun_device":        func(c *File) { c.TunDevice = "mesh9" },
		"overlay_mode":      func(c *File) { c.OverlayMode = OverlayUserspace },
		"timers":            func(c *File) { c.Timers = TimersFast },
		"overlay_routines":  func(c *File) { c.OverlayRoutines = 3 },
		"overlay_offloads":  func(c *File) { c.OverlayOffloads = !c.OverlayOffloads },
		"ports.gossip":      func(c *File) { c.Ports.Gossip = 8000 },
		"relay":             func(c *File) { c.Relay = !c.Relay },
		"overlay_mtu":       func(c *File) { c.OverlayMTU = 1280 },
		"firewall.inbound":  func(c *File) { c.Firewall.Inbound = append(c.Firewall.Inbound, c.Firewall.Inbound...) },
		"firewall.outbound": func(c *File) { c.Firewall.Outbound = append(c.Firewall.Outbound, c.Firewall.Outbound...) },
	}
	underlay := netip.MustParseAddr("192.0.2.7")
	for key, edit := range edits {
		c := base
		c.Firewall.Inbound, c.Firewall.Outbound = slices.Clone(base.Firewall.Inbound), slices.Clone(base.Firewall.Outbound)
		edit(&c)
		if changed := ChangedFields(base, c); !slices.Contains(changed, key) {
			t.Fatalf("the edit for %s changes %v", key, changed)
		}
		a, b := base.MeshBase(pki.RoleWorker, underlay), c.MeshBase(pki.RoleWorker, underlay)
		var moved []string
		va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
		for i := range va.NumField() {
			if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
				moved = append(moved, va.Type().Field(i).Name)
			}
		}
		if len(moved) == 0 {
			t.Errorf("%s moves no mesh.Config field", key)
		}
		for _, f := range moved {
			if MeshKey(f) != key {
				t.Errorf("%s moves mesh.Config.%s, which MeshKey names %q", key, f, MeshKey(f))
			}
		}
	}
	for f, key := range meshKeys {
		if _, ok := edits[key]; !ok {
			t.Errorf("MeshKey(%s) = %s, which this test does not edit", f, key)
		}
	}
}

// TestNameMeshSetting: an overlay error naming a mesh.Config field names
// its meshd.yaml key and this config's value of it instead, keeps its code
// and what it wraps; anything else is left as it is.
func TestNameMeshSetting(t *testing.T) {
	c := Default()
	c.Ports.Nebula, c.OverlayMode = 4343, OverlayUserspace
	cause := fmt.Errorf("UDP 127.0.0.5:4343 is taken by another process: %w", syscall.EADDRINUSE)
	err := codes.Wrap(codes.OverlayApply, fmt.Errorf("start overlay: %w", &mesh.ConfigError{Field: "ListenPort", Value: "4343", Err: cause}))
	got := c.NameMeshSetting("start overlay", err)
	var ce *Error
	if codes.Of(got) != codes.OverlayApply || !errors.As(got, &ce) || ce.Field != "ports.nebula" || ce.Value != "4343" ||
		!errors.Is(got, syscall.EADDRINUSE) || !strings.HasPrefix(got.Error(), `start overlay: ports.nebula = "4343": UDP`) {
		t.Fatalf("named: %v (%s), %+v", got, codes.Of(got), ce)
	}
	mode := codes.Wrap(codes.OverlayApply, &mesh.ConfigError{Field: "Userspace", Value: "true", Err: errors.New("no device")})
	if got := c.NameMeshSetting("start overlay", mode); !errors.As(got, &ce) || ce.Field != "overlay_mode" || ce.Value != "userspace" {
		t.Fatalf("overlay_mode named %v", got)
	}
	for _, plain := range []error{
		codes.Wrap(codes.OverlayApply, errors.New("start overlay: verify")),
		codes.Wrap(codes.OverlayApply, &mesh.ConfigError{Field: "Cert", Err: errors.New("expired")}),
	} {
		if got := c.NameMeshSetting("start overlay", plain); got != plain {
			t.Fatalf("%v became %v", plain, got)
		}
	}
}
