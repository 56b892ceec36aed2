package member

import (
	"crypto/rand"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/config"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/statedir"
	"github.com/meshd/meshd/gossip"
	"github.com/meshd/meshd/gossip/gossiptest"
	"github.com/meshd/meshd/loopbacktest"
	"github.com/meshd/meshd/pki"
)

// forgedViewPort is every gossip member's port in TestForgedDeathNotShown,
// each on its own loopback address.
const forgedViewPort = 7957

// startTaggedGossip runs a worker's gossip on its own loopback address,
// tagged as a member whose record holds that address as its overlay IP.
func startTaggedGossip(t *testing.T, name string, key []byte) (*gossip.Gossip, netip.Addr) {
	t.Helper()
	ip := loopbacktest.TakeIP(t, "127.82")
	cfg := gossip.DefaultConfig()
	cfg.Name, cfg.BindAddr, cfg.BindPort, cfg.Keys, cfg.Fast = name, ip, forgedViewPort, [][]byte{key}, true
	cfg.Tags = map[string]string{tagID: "id-" + name, tagRole: string(pki.RoleWorker), tagOverlay: ip}
	cfg.Log = slog.New(slog.DiscardHandler)
	g, err := gossip.New(cfg)
	if err != nil {
		t.Fatalf("gossip %s: %v", name, err)
	}
	t.Cleanup(func() { _ = g.Shutdown() })
	return g, netip.MustParseAddr(ip)
}

// TestForgedDeathNotShown (issue 52 item 8): a holder of the gossip key
// sends memberlist dead messages (as from the victim itself) and serf
// leave intents about live b to a, every 50 ms. a's serf believes them
// between b's refutations (its own status of b flaps to failed, leaving
// or left), but a's gossip view, which `meshctl nodes` and the control
// plane read, never shows b failed, left or leaving: a's direct probe of
// b's record's overlay address (its gossip port, here on the loopback)
// answers. On main the view showed serf's status as it was.
func TestForgedDeathNotShown(t *testing.T) {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	a, aIP := startTaggedGossip(t, "a", key)
	b, bIP := startTaggedGossip(t, "b", key)
	if n, err := b.Join(t.Context(), []string{net.JoinHostPort(aIP.String(), strconv.Itoa(forgedViewPort))}); err != nil || n != 1 {
		t.Fatalf("b joins a: %d, %v", n, err)
	}
	record := func(name string, ip netip.Addr) control.NodeRecord {
		return control.NodeRecord{Node: apitype.Node{ID: "id-" + name, Name: name, Role: string(pki.RoleWorker),
			State: "active", OverlayIP: ip.String()}}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	nd := &node{cluster: &listFacts{list: []control.NodeRecord{record("a", aIP), record("b", bIP)}}, log: log,
		facts:  &statedir.Facts{NodeID: "id-a", Name: "a", Overlay: netip.PrefixFrom(aIP, 8)},
		ports:  config.Ports{Gossip: forgedViewPort},
		gossip: a}
	ms := &membership{node: nd, ov: &overlay{node: nd}, keys: &keyring{node: nd},
		evidence: newEvidence(nd.gossipListens, 2*time.Second, time.Now, log)} // a TCP connection to b's gossip port
	t.Cleanup(ms.evidence.close)
	waitUntil(t, 5*time.Second, "a sees b alive", func() bool { return ms.gossipView()["b"] == gossip.StatusAlive })

	forger, err := net.ListenPacket("udp4", net.JoinHostPort(loopbacktest.TakeIP(t, "127.82"), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer forger.Close()
	to := &net.UDPAddr{IP: aIP.AsSlice(), Port: forgedViewPort}
	believed, shown := map[gossip.Status]int{}, map[gossip.Status]int{}
	for i := range 60 { // 3 s
		dead, err := gossiptest.Dead(key, "b", uint32(1000*(i+1)))
		if err != nil {
			t.Fatal(err)
		}
		leave, err := gossiptest.Leave(key, "b", uint64(1)<<32+uint64(1000*i))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range [][]byte{leave, dead} {
			if _, err := forger.WriteTo(p, to); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(50 * time.Millisecond) // the forger's pace (the attack measured on main)
		for _, m := range a.Members() {
			if m.Name == "b" {
				believed[m.Status]++
			}
		}
		shown[ms.gossipView()["b"]]++
	}
	t.Logf("a's serf had b %v over 60 samples; a's view showed %v", believed, shown)
	if believed[gossip.StatusFailed]+believed[gossip.StatusLeft]+believed[gossip.StatusLeaving] == 0 {
		t.Fatalf("the forgery never reached a's serf (%v): the test shows nothing", believed)
	}
	for _, st := range []gossip.Status{gossip.StatusFailed, gossip.StatusLeft, gossip.StatusLeaving} {
		if shown[st] > 0 {
			t.Fatalf("a's view showed live b %s in %d of 60 samples on forged gossip (%v)", st, shown[st], shown)
		}
	}
	if shown[gossip.StatusSuspect] > 1 { // the first look waits for the first probe (evidenceSettle); once on a busy machine
		t.Fatalf("a's view showed live b suspect in %d of 60 samples: its probe's answer did not count", shown[gossip.StatusSuspect])
	}
}
