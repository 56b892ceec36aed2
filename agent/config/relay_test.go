package config

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// TestRelayConfig: `relay: true` makes a worker a Nebula relay (am_relay);
// the default is false, a control node relays either way, and a value
// that is not a boolean is refused with its line and field.
func TestRelayConfig(t *testing.T) {
	if Default().Relay {
		t.Fatal("relay defaults to true")
	}
	u := netip.MustParseAddr("192.0.2.10")
	if Default().MeshBase(pki.RoleWorker, u).AmRelay {
		t.Error("a worker without relay: true renders am_relay")
	}
	if !Default().MeshBase(pki.RoleControl, u).AmRelay {
		t.Error("a control node does not render am_relay")
	}
	c, err := Check(writeCfgFile(t, "relay: true\n"), true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Relay || !c.MeshBase(pki.RoleWorker, u).AmRelay {
		t.Errorf("relay: true read as %v; am_relay %v", c.Relay, c.MeshBase(pki.RoleWorker, u).AmRelay)
	}
	_, err = Check(writeCfgFile(t, "log_level: info\nrelay: sometimes\n"), true, nil)
	ce, ok := errors.AsType[*Errors](err)
	if codes.Of(err) != codes.ConfigInvalid || !ok || len(ce.Problems) != 1 || ce.Problems[0].Field != "relay" || ce.Problems[0].Line != 2 {
		t.Fatalf("relay: sometimes: %v, want one ConfigInvalid problem at line 2, field relay", err)
	}
}
