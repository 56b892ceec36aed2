package gossip

import (
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/netip"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"

	"github.com/meshd/meshd/codes"
)

// DefaultPort is the serf/memberlist port (tcp and udp), DESIGN §3.
const DefaultPort = 7946

// Reclaim times for a dead node's name (memberlist DeadNodeReclaimTime):
// after this long a node with the same name may come back at any address.
const (
	deadNodeReclaim     = 30 * time.Second
	deadNodeReclaimFast = 100 * time.Millisecond
)

// lanGossipInterval is memberlist's gossip tick with meshd's LAN timers
// (memberlist's LAN config has 200 ms). The tick sends only when
// broadcasts are queued (a member's change: alive, suspect, dead, serf's
// intents, events and queries), but wakes the process each time: at rest,
// with nothing queued, memberlist's gossip() picks its random members and
// finds nothing to send, five times a second. Broadcasts also ride every
// probe, ack and indirect probe (memberlist's sendMsg piggybacks them),
// and failure detection is the probes' (1 s) and the suspicion timeout's
// (4 s and up), neither of which the tick sets; a slower tick delays a
// queued broadcast's next hop by up to lanGossipInterval (issue 54: an
// idle worker's wakeups, docs/performance.md "Issue 54: idle at 10,000
// and at 2 nodes, session 5").
const lanGossipInterval = 500 * time.Millisecond

// lanGossipNodes is how many members each tick sends the queued
// broadcasts to with meshd's LAN timers (memberlist's LAN config: 3 every
// 200 ms). 8 every 500 ms keeps the rate a node can send broadcasts at
// (16 packets a second against 15) for when many are queued: forming a
// cluster queues an alive broadcast per member for every member
// (gossip.BenchmarkGossipSim at 250 members with a 500 ms tick and 3
// members a tick did not drain its queues by the deadline), and fans
// each hop out wider, so a broadcast reaches N members in fewer hops.
const lanGossipNodes = 8

// maxNameLen is serf's and memberlist's limit on a node name.
const maxNameLen = 128

// Config is the gossip configuration. It is plain data: copy it freely.
// Start from DefaultConfig and check it with Validate (New does).
type Config struct {
	// Name is the memberlist node name: the meshd node name, unique in the
	// cluster and stable across restarts.
	Name string
	// BindAddr is the IP to bind, e.g. "0.0.0.0" or "127.77.1.2".
	BindAddr string
	// BindPort is the tcp and udp port to bind, 1-65535; default 7946.
	BindPort int
	// AdvertiseAddr is the IP other nodes reach this node on. Empty means
	// BindAddr, which must then be a specific address: an unspecified bind
	// address needs an explicit AdvertiseAddr, so nothing is guessed.
	AdvertiseAddr string
	// AdvertisePort is the port others reach this node on; 0 means BindPort.
	AdvertisePort int
	// Network, when not nil, gives the sockets BindAddr is bound on (a
	// userspace overlay's); nil means the kernel's.
	Network Network
	// Overlay, when valid, is the network gossip rides (meshd: the
	// cluster's overlay prefix, BindAddr the node's overlay address):
	// members advertising an address outside it (the previous release's,
	// on the underlay) are sent to and dialled through the kernel, never
	// through Network or from the bound address. Nothing is received
	// outside the bound sockets.
	Overlay netip.Prefix
	// Keys are the AES gossip keys (16, 24 or 32 bytes; meshd uses 32), the
	// primary first. At least one is required: gossip is never plaintext.
	Keys [][]byte
	// Tags are this node's serf tags (meshd: role, id, overlay IP, nebula
	// port). Their encoding must fit memberlist's 512-byte meta limit.
	Tags map[string]string
	// SnapshotPath is serf's snapshot file, so a restarted node rejoins the
	// members it knew without an explicit Join; "" keeps no snapshot.
	SnapshotPath string
	// Fast selects test timers: probe 200ms (timeout 100ms), suspicion
	// multiplier 2, gossip 100ms, push/pull 5s, dead-name reclaim 100ms and a
	// 200ms leave propagation delay. Otherwise memberlist.DefaultLANConfig
	// and serf's defaults apply, with a slower gossip tick
	// (lanGossipInterval).
	Fast bool
	// ReconnectTimeout is how long a failed member is kept (and retried)
	// before it is reaped; 0 means serf's default (24h).
	ReconnectTimeout time.Duration
	// Log receives serf and memberlist log lines, tagged component=gossip;
	// nil discards them.
	Log *slog.Logger
}

// DefaultConfig returns the production defaults: bind 0.0.0.0:7946, LAN
// timers. Name, AdvertiseAddr and Keys must still be filled in.
func DefaultConfig() Config {
	return Config{
		BindAddr: "0.0.0.0",
		BindPort: DefaultPort,
	}
}

// Validate checks c without touching the network or the disk. Key problems
// carry codes.GossipKey, a bad name codes.BadNodeName, anything else
// codes.ConfigInvalid; each message names the field.
func (c Config) Validate() error {
	if c.Name == "" || len(c.Name) > maxNameLen {
		return codes.Errorf(codes.BadNodeName, "gossip: name %q: must be 1-%d bytes", c.Name, maxNameLen)
	}
	if len(c.Keys) == 0 {
		return codes.Wrap(codes.GossipKey, errors.New("gossip: keys: at least one gossip key is required (gossip is never plaintext)"))
	}
	for i, k := range c.Keys {
		if err := memberlist.ValidateKey(k); err != nil {
			// Never print the key itself, only its position and length.
			return codes.Errorf(codes.GossipKey, "gossip: keys[%d]: %d bytes, want 16, 24 or 32 (AES-128/192/256)", i, len(k))
		}
	}
	bind, err := netip.ParseAddr(c.BindAddr)
	if err != nil {
		return codes.Errorf(codes.ConfigInvalid, "gossip: bind address %q: not an IP address", c.BindAddr)
	}
	if c.BindPort < 1 || c.BindPort > 65535 {
		return codes.Errorf(codes.ConfigInvalid, "gossip: bind port %d: want 1-65535", c.BindPort)
	}
	if c.AdvertisePort < 0 || c.AdvertisePort > 65535 {
		return codes.Errorf(codes.ConfigInvalid, "gossip: advertise port %d: want 0 (the bind port) or 1-65535", c.AdvertisePort)
	}
	if c.AdvertiseAddr == "" {
		if bind.IsUnspecified() {
			return codes.Errorf(codes.ConfigInvalid, "gossip: advertise address: required when binding %s", c.BindAddr)
		}
	} else {
		adv, err := netip.ParseAddr(c.AdvertiseAddr)
		if err != nil || adv.IsUnspecified() {
			return codes.Errorf(codes.ConfigInvalid, "gossip: advertise address %q: want a specific IP address", c.AdvertiseAddr)
		}
	}
	if c.ReconnectTimeout < 0 {
		return codes.Errorf(codes.ConfigInvalid, "gossip: reconnect timeout %v: must not be negative", c.ReconnectTimeout)
	}
	return nil
}

// advertise returns the address and port others reach this node on.
func (c Config) advertise() (string, int) {
	addr, port := c.AdvertiseAddr, c.AdvertisePort
	if addr == "" {
		addr = c.BindAddr
	}
	if port == 0 {
		port = c.BindPort
	}
	return addr, port
}

// serfConfig builds the serf (and memberlist) configuration for a validated
// c. Events go to eventCh, and both libraries log through logger.
func (c Config) serfConfig(eventCh chan<- serf.Event, logger *log.Logger) (*serf.Config, error) {
	ring, err := memberlist.NewKeyring(c.Keys[1:], c.Keys[0])
	if err != nil {
		return nil, codes.Wrap(codes.GossipKey, fmt.Errorf("gossip: keyring: %w", err))
	}

	ml := memberlist.DefaultLANConfig()
	ml.Name = c.Name
	ml.BindAddr = c.BindAddr
	ml.BindPort = c.BindPort
	ml.AdvertiseAddr, ml.AdvertisePort = c.advertise()
	ml.Keyring = ring
	ml.GossipVerifyIncoming = true
	ml.GossipVerifyOutgoing = true
	ml.DeadNodeReclaimTime = deadNodeReclaim
	// No LZW: meshd's gossip messages fit a packet uncompressed, and
	// memberlist allocates a fresh LZW table for every compressed send,
	// about 80% of what an idle meshd allocated (docs/performance.md). A
	// member still reads compressed messages from older members.
	ml.EnableCompression = false
	ml.LogOutput = nil // memberlist refuses both LogOutput and Logger
	ml.Logger = logger
	ml.GossipInterval, ml.GossipNodes = lanGossipInterval, lanGossipNodes
	if c.Fast { // memberlist's fan-out of 3, a tick of its own
		ml.GossipNodes = memberlist.DefaultLANConfig().GossipNodes
		ml.ProbeInterval = 200 * time.Millisecond
		ml.ProbeTimeout = 100 * time.Millisecond
		ml.SuspicionMult = 2
		ml.GossipInterval = 100 * time.Millisecond
		ml.PushPullInterval = 5 * time.Second
		ml.DeadNodeReclaimTime = deadNodeReclaimFast
	}

	sc := serf.DefaultConfig()
	sc.NodeName = c.Name
	sc.Tags = cloneTags(c.Tags)
	sc.EventCh = eventCh
	sc.SnapshotPath = c.SnapshotPath
	sc.RejoinAfterLeave = false
	sc.EnableNameConflictResolution = false
	sc.MemberlistConfig = ml
	sc.LogOutput = nil
	sc.Logger = logger
	if c.ReconnectTimeout > 0 {
		sc.ReconnectTimeout = c.ReconnectTimeout
	}
	if c.Fast {
		sc.LeavePropagateDelay = 200 * time.Millisecond
	}
	return sc, nil
}

// cloneTags copies a tag map, so neither the caller nor serf sees the
// other's later changes.
func cloneTags(tags map[string]string) map[string]string {
	out := make(map[string]string, len(tags))
	for k, v := range tags {
		out[k] = v
	}
	return out
}
