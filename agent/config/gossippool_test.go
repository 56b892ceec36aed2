package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// TestGossipPoolConfig: gossip_pool defaults to true; `gossip_pool: false`
// is read on a worker and refused on a control node with its field and a
// hint; a value that is not a boolean is refused with its line and field.
func TestGossipPoolConfig(t *testing.T) {
	if !Default().GossipPool {
		t.Fatal("gossip_pool defaults to false")
	}
	for _, r := range []pki.Role{pki.RoleControl, pki.RoleWorker} {
		if err := Default().CheckRole(r); err != nil {
			t.Errorf("the default refused on a %s node: %v", r, err)
		}
	}
	c, err := Check(writeCfgFile(t, "gossip_pool: false\n"), true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.GossipPool {
		t.Fatal("gossip_pool: false read as true")
	}
	if err := c.CheckRole(pki.RoleWorker); err != nil {
		t.Errorf("gossip_pool: false refused on a worker: %v", err)
	}
	err = c.CheckRole(pki.RoleControl)
	ce, ok := errors.AsType[*Errors](err)
	if codes.Of(err) != codes.ConfigInvalid || !ok || len(ce.Problems) != 1 || ce.Problems[0].Field != "gossip_pool" ||
		!strings.Contains(err.Error(), "control") {
		t.Fatalf("gossip_pool: false on a control node: %v, want one ConfigInvalid problem naming gossip_pool and the role", err)
	}
	_, err = Check(writeCfgFile(t, "log_level: info\ngossip_pool: maybe\n"), true, nil)
	ce, ok = errors.AsType[*Errors](err)
	if codes.Of(err) != codes.ConfigInvalid || !ok || len(ce.Problems) != 1 || ce.Problems[0].Field != "gossip_pool" || ce.Problems[0].Line != 2 {
		t.Fatalf("gossip_pool: maybe: %v, want one ConfigInvalid problem at line 2, field gossip_pool", err)
	}
}
