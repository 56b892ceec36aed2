package gossip

import (
	"bytes"
	"log"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"

	"github.com/meshd/meshd/codes"
)

// validConfig is a config that passes Validate, without touching the network.
func validConfig() Config {
	c := DefaultConfig()
	c.Name = "n1"
	c.BindAddr = "127.78.0.1"
	c.Keys = [][]byte{bytes.Repeat([]byte{1}, 32)}
	return c
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want codes.Code
	}{
		{"ok/specific-bind", func(*Config) {}, ""},
		{"ok/any-bind-with-advertise", func(c *Config) { c.BindAddr, c.AdvertiseAddr = "0.0.0.0", "192.0.2.7" }, ""},
		{"ok/aes128-and-aes192-secondaries", func(c *Config) {
			c.Keys = append(c.Keys, make([]byte, 16), make([]byte, 24))
		}, ""},
		{"ok/advertise-port", func(c *Config) { c.AdvertisePort = 17946 }, ""},
		{"fail/no-key", func(c *Config) { c.Keys = nil }, codes.GossipKey},
		{"fail/empty-key", func(c *Config) { c.Keys = [][]byte{{}} }, codes.GossipKey},
		{"fail/short-key", func(c *Config) { c.Keys = [][]byte{make([]byte, 31)} }, codes.GossipKey},
		{"fail/long-key", func(c *Config) { c.Keys = [][]byte{make([]byte, 33)} }, codes.GossipKey},
		{"fail/bad-secondary", func(c *Config) { c.Keys = append(c.Keys, make([]byte, 8)) }, codes.GossipKey},
		{"fail/no-name", func(c *Config) { c.Name = "" }, codes.BadNodeName},
		{"fail/long-name", func(c *Config) { c.Name = strings.Repeat("n", 129) }, codes.BadNodeName},
		{"fail/port-zero", func(c *Config) { c.BindPort = 0 }, codes.ConfigInvalid},
		{"fail/port-negative", func(c *Config) { c.BindPort = -1 }, codes.ConfigInvalid},
		{"fail/port-too-big", func(c *Config) { c.BindPort = 65536 }, codes.ConfigInvalid},
		{"fail/advertise-port", func(c *Config) { c.AdvertisePort = 70000 }, codes.ConfigInvalid},
		{"fail/bind-not-ip", func(c *Config) { c.BindAddr = "localhost" }, codes.ConfigInvalid},
		{"fail/any-bind-no-advertise", func(c *Config) { c.BindAddr = "0.0.0.0" }, codes.ConfigInvalid},
		{"fail/advertise-unspecified", func(c *Config) { c.AdvertiseAddr = "::" }, codes.ConfigInvalid},
		{"fail/advertise-not-ip", func(c *Config) { c.AdvertiseAddr = "host.example" }, codes.ConfigInvalid},
		{"fail/negative-reconnect", func(c *Config) { c.ReconnectTimeout = -time.Second }, codes.ConfigInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.edit(&c)
			err := c.Validate()
			if got := codes.Of(err); got != tc.want || (tc.want == "") != (err == nil) {
				t.Fatalf("Validate() = %v (code %q), want code %q", err, got, tc.want)
			}
			if tc.want == "" {
				return
			}
			// New refuses the same config before binding anything.
			if _, err := New(c); codes.Of(err) != tc.want {
				t.Errorf("New() = %v, want code %q", err, tc.want)
			}
		})
	}
}

func TestValidateNeverPrintsKeys(t *testing.T) {
	c := validConfig()
	c.Keys = [][]byte{[]byte("0123456789abcdef0123456789abcdeX!")} // 33 bytes
	err := c.Validate()
	if err == nil || strings.Contains(err.Error(), "0123456789") {
		t.Fatalf("Validate() = %v: want an error that does not show the key", err)
	}
}

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	if c.BindAddr != "0.0.0.0" || c.BindPort != 7946 || c.Fast {
		t.Fatalf("DefaultConfig() = %+v", c)
	}
	if codes.Of(c.Validate()) == "" {
		t.Fatal("DefaultConfig validates without a name and key")
	}
}

func TestSerfConfig(t *testing.T) {
	primary, secondary := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 16)
	for _, fast := range []bool{false, true} {
		c := validConfig()
		c.Keys = [][]byte{primary, secondary}
		c.Fast = fast
		c.Tags = map[string]string{"role": "control"}
		c.ReconnectTimeout = time.Hour
		sc, err := c.serfConfig(make(chan serf.Event), log.New(&bytes.Buffer{}, "", 0))
		if err != nil {
			t.Fatal(err)
		}
		ml := sc.MemberlistConfig
		if !bytes.Equal(ml.Keyring.GetPrimaryKey(), primary) || len(ml.Keyring.GetKeys()) != 2 {
			t.Errorf("keyring: primary not first or keys missing")
		}
		if !ml.GossipVerifyIncoming || !ml.GossipVerifyOutgoing {
			t.Error("gossip verification must be on both ways")
		}
		if sc.EnableNameConflictResolution || sc.RejoinAfterLeave {
			t.Error("name conflict resolution and rejoin-after-leave must be off")
		}
		if ml.BindAddr != "127.78.0.1" || ml.AdvertiseAddr != "127.78.0.1" || ml.BindPort != 7946 || ml.AdvertisePort != 7946 {
			t.Errorf("bind %s:%d advertise %s:%d", ml.BindAddr, ml.BindPort, ml.AdvertiseAddr, ml.AdvertisePort)
		}
		if sc.ReconnectTimeout != time.Hour || sc.Tags["role"] != "control" || sc.NodeName != "n1" {
			t.Errorf("reconnect %v tags %v name %q", sc.ReconnectTimeout, sc.Tags, sc.NodeName)
		}
		if ml.LogOutput != nil || sc.LogOutput != nil || ml.Logger == nil || sc.Logger == nil {
			t.Error("both libraries must log through the given logger only")
		}
		lan := memberlist.DefaultLANConfig()
		want := struct {
			probe, probeTimeout, gossip, pushPull, reclaim time.Duration
			suspicion, retransmit, gossipNodes             int
		}{lan.ProbeInterval, lan.ProbeTimeout, lanGossipInterval, lan.PushPullInterval, 30 * time.Second, lan.SuspicionMult, lan.RetransmitMult, lanGossipNodes}
		if fast {
			want.probe, want.probeTimeout, want.gossip, want.pushPull, want.reclaim = 200*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond, 5*time.Second, 100*time.Millisecond
			want.suspicion, want.gossipNodes = 2, lan.GossipNodes
		}
		if ml.ProbeInterval != want.probe || ml.ProbeTimeout != want.probeTimeout || ml.GossipInterval != want.gossip ||
			ml.PushPullInterval != want.pushPull || ml.DeadNodeReclaimTime != want.reclaim ||
			ml.SuspicionMult != want.suspicion || ml.RetransmitMult != want.retransmit || ml.GossipNodes != want.gossipNodes {
			t.Errorf("fast=%v: timers %+v, want %+v", fast, ml, want)
		}
		if ml.EnableCompression {
			t.Errorf("fast=%v: memberlist compression on; meshd runs it off", fast)
		}
	}
}

func TestNewBindErrors(t *testing.T) {
	c := validConfig()
	c.BindAddr = "192.0.2.1" // TEST-NET-1: on no interface here
	if _, err := New(c); codes.Of(err) != codes.AdvertiseAddr {
		t.Errorf("New on a foreign address: %v, want %s", err, codes.AdvertiseAddr)
	}

	c = validConfig()
	c.BindAddr = takeIP(t)
	l, err := net.Listen("tcp", net.JoinHostPort(c.BindAddr, "7946"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := New(c); codes.Of(err) != codes.ConfigInvalid {
		t.Errorf("New on a port in use: %v, want %s", err, codes.ConfigInvalid)
	}
}

func TestNewBadSnapshot(t *testing.T) {
	c := validConfig()
	c.BindAddr = takeIP(t)
	c.SnapshotPath = t.TempDir() // a directory, not a file
	c.Log = slog.New(slog.DiscardHandler)
	_, err := New(c)
	if codes.Of(err) != codes.StateDir {
		t.Fatalf("New with an unusable snapshot: %v, want %s", err, codes.StateDir)
	}
}
