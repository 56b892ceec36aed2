package config

import (
	"errors"
	"testing"

	"github.com/meshd/meshd/codes"
)

// TestGossipPoolConfig: gossip_pool defaults to false (a worker out of
// the gossip pool; a control node is in it whatever the file says,
// member.inPool); `gossip_pool: true` is read (a worker opted back in);
// a value that is not a boolean is refused with its line and field.
func TestGossipPoolConfig(t *testing.T) {
	if Default().GossipPool {
		t.Fatal("gossip_pool defaults to true, want false (workers out of the pool)")
	}
	c, err := Check(writeCfgFile(t, "gossip_pool: true\n"), true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.GossipPool {
		t.Fatal("gossip_pool: true read as false")
	}
	c, err = Check(writeCfgFile(t, "gossip_pool: false\n"), true, nil)
	if err != nil || c.GossipPool {
		t.Fatalf("gossip_pool: false: %v, %v; want read as false", c.GossipPool, err)
	}
	_, err = Check(writeCfgFile(t, "log_level: info\ngossip_pool: maybe\n"), true, nil)
	ce, ok := errors.AsType[*Errors](err)
	if codes.Of(err) != codes.ConfigInvalid || !ok || len(ce.Problems) != 1 || ce.Problems[0].Field != "gossip_pool" || ce.Problems[0].Line != 2 {
		t.Fatalf("gossip_pool: maybe: %v, want one ConfigInvalid problem at line 2, field gossip_pool", err)
	}
}
