package config

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/mesh"
)

// meshKeys are the meshd.yaml keys MeshBase sets mesh.Config fields from
// (its mapping read backwards; TestMeshKeys checks each against
// MeshBase). The other fields (the identity, the peers, the lighthouse
// role) come from the cluster, not from a key.
var meshKeys = map[string]string{
	"ListenHost":  "bind_addr",
	"ListenPort":  "ports.nebula",
	"TunDev":      "tun_device",
	"Userspace":   "overlay_mode",
	"Fast":        "timers",
	"Routines":    "overlay_routines",
	"Offloads":    "overlay_offloads",
	"GossipPort":  "ports.gossip",
	"AmRelay":     "relay",
	"IdleTimeout": "relay", // a relay keeps its idle tunnels (MeshBase)
	"MTU":         "overlay_mtu",
	"Inbound":     "firewall.inbound",
	"Outbound":    "firewall.outbound",
}

// MeshKey is the meshd.yaml key a mesh.Config field is set from, "" for
// a field no key sets.
func MeshKey(field string) string { return meshKeys[field] }

// NameMeshSetting makes an error of the overlay that names a mesh.Config
// field (a *mesh.ConfigError: a setting Nebula refused at start, or one
// that failed validation) name the meshd.yaml key behind it instead, as
// an *Error with c's value of that key and why: `what: ports.nebula =
// "4242": UDP 127.0.0.5:4242 is taken by another process (...)`. Its code
// stays. An error that names no such field is returned as it is.
func (c File) NameMeshSetting(what string, err error) error {
	var me *mesh.ConfigError
	if !errors.As(err, &me) {
		return err
	}
	key := MeshKey(me.Field)
	if key == "" {
		return err
	}
	value, ok := c.valueOf(key)
	if !ok {
		value = me.Value
	}
	return codes.Wrap(codes.OrInternal(err), fmt.Errorf("%s: %w", what, &Error{Field: key, Value: value, Err: me.Err}))
}

// valueOf is c's value of the scalar key ("ports.nebula"), as text; false
// for a key c has no scalar of.
func (c File) valueOf(key string) (string, bool) {
	v := reflect.ValueOf(c)
	for part := range strings.SplitSeq(key, ".") {
		if v.Kind() != reflect.Struct {
			return "", false
		}
		t, found := v.Type(), false
		for i := range t.NumField() {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			if name == part {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			return "", false
		}
	}
	switch v.Kind() {
	case reflect.Struct, reflect.Slice, reflect.Map, reflect.Pointer:
		return "", false
	}
	return fmt.Sprint(v.Interface()), true
}
