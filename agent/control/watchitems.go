package control

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/pki"
)

// What a change of the watch table carries of a node record and of a
// revocation (watch.go), and the records' encodings kept between
// rebuilds.

// watchRecord is a node's record in the watch table: what a worker
// decides with (peers, lighthouses, relays, control nodes, names), each
// field omitted when empty, since every byte of a change is sent to every
// worker (issue 32: at most 200 KiB per change at 1,000 workers). A
// departed or joining node's record carries its state only (no worker
// decides anything by it but that it exists), a worker's no role (it is
// the default) and no TLS leaf (workers check only control nodes'
// leaves). What a worker does not decide by (groups, ephemeral, the
// address a join came from, versions, expiries) stays out: its `meshctl
// nodes` asks a control node.
type watchRecord struct {
	Name       string `json:"name,omitempty"`
	Role       string `json:"role,omitempty"`
	State      string `json:"state"`
	OverlayIP  string `json:"ip,omitempty"`
	OverlayIP6 string `json:"ip6,omitempty"`
	Underlay   string `json:"ul,omitempty"`
	Relay      bool   `json:"relay,omitempty"`
	NebulaPort int    `json:"np,omitempty"`
	EnrollAddr string `json:"ea,omitempty"`
	SerfAddr   string `json:"sa,omitempty"`
	TLSFP      string `json:"tls,omitempty"`
	PrevTLSFP  string `json:"ptls,omitempty"`
	TLSKey     []byte `json:"tlskey,omitempty"`
	Routes     string `json:"rt,omitempty"`  // routeWire
	Held       string `json:"hd,omitempty"`  // the prefixes its current Nebula certificate holds, comma-separated
	Unheard    int64  `json:"uh,omitempty"`  // apitype.Node.Unheard, Unix seconds; 0 while heard
	NAT        string `json:"nat,omitempty"` // its reported NAT (poolfacts.go)
	OutOfPool  bool   `json:"op,omitempty"`  // runs no gossip: no rejoin dials it
}

func recordOf(n state.Node) watchRecord {
	if n.State != state.NodeActive {
		return watchRecord{State: string(n.State)}
	}
	r := watchRecord{Name: n.Name, State: string(n.State), Underlay: n.Underlay, Relay: n.Relay,
		NebulaPort: n.NebulaPort, EnrollAddr: n.EnrollAddr, SerfAddr: n.SerfAddr, Routes: routeWire(n),
		Held: prefixWire(n.NebulaRoutes), NAT: n.NAT, OutOfPool: n.OutOfPool}
	if !n.Unheard.IsZero() {
		r.Unheard = n.Unheard.Unix()
	}
	if n.OverlayIP.IsValid() {
		r.OverlayIP = n.OverlayIP.String()
	}
	if n.OverlayIP6.IsValid() {
		r.OverlayIP6 = n.OverlayIP6.String()
	}
	if n.Role != pki.RoleWorker {
		r.Role = string(n.Role)
	}
	if n.Role == pki.RoleControl {
		r.TLSFP, r.PrevTLSFP, r.TLSKey = n.TLSFingerprint, n.PrevTLSFingerprint, n.TLSPublicKey
	}
	return r
}

// WatchedRecord decodes a node record of the watch table (id is its key)
// into the NodeRecord a worker's node list holds.
func WatchedRecord(id string, raw json.RawMessage) (NodeRecord, error) {
	var w watchRecord
	if err := json.Unmarshal(raw, &w); err != nil {
		return NodeRecord{}, fmt.Errorf("node record %s: %w", id, err)
	}
	return w.nodeRecord(id), nil
}

// nodeRecord is the NodeRecord the watch record w of node id gives: what
// a worker holds of another node, nothing more.
func (w watchRecord) nodeRecord(id string) NodeRecord {
	role := cmp.Or(w.Role, string(pki.RoleWorker))
	r := NodeRecord{Node: apitype.Node{Name: w.Name, ID: id, Role: role, State: w.State, OverlayIP: w.OverlayIP,
		OverlayIP6: w.OverlayIP6, Underlay: w.Underlay, Relay: w.Relay, Routes: routesFromWire(w.Routes, w.Held)},
		NebulaPort: w.NebulaPort, EnrollAddr: w.EnrollAddr, SerfAddr: w.SerfAddr,
		TLSFingerprint: w.TLSFP, PrevTLSFingerprint: w.PrevTLSFP, TLSPublicKey: w.TLSKey, NAT: w.NAT, OutOfPool: w.OutOfPool}
	if w.Held != "" {
		r.NebulaRoutes = strings.Split(w.Held, ",")
	}
	if w.Unheard != 0 {
		r.Unheard = time.Unix(w.Unheard, 0).UTC()
	}
	return r
}

// revokedItem is the i-th revocation as the watch table holds it: a
// removed node's Nebula certificate fingerprint, as 43 characters of
// unpadded base64url when it is a SHA-256 in hex (else as it is); a TLS
// leaf's as 0, counted but not carried (no worker's Nebula blocks a TLS
// leaf; control nodes refuse it themselves), so a worker's list has the
// length on record, the version a revocation query names.
func revokedItem(r state.Revocation, n state.Node, known bool) json.RawMessage {
	if known && (r.Fingerprint == n.TLSFingerprint || r.Fingerprint == n.PrevTLSFingerprint || slices.Contains(n.Retired, r.Fingerprint)) {
		return json.RawMessage("0")
	}
	if b, err := hex.DecodeString(r.Fingerprint); err == nil && len(b) == sha256.Size {
		return mustJSON(base64.RawURLEncoding.EncodeToString(b))
	}
	return mustJSON(r.Fingerprint)
}

// WatchedRevocation decodes a revocation of the watch table: the
// fingerprint a Nebula blocks, or "" for one counted only (a TLS leaf).
func WatchedRevocation(raw json.RawMessage) (string, error) {
	if string(raw) == "0" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("revocation %s: %w", raw, err)
	}
	if len(s) == base64.RawURLEncoding.EncodedLen(sha256.Size) {
		if b, err := base64.RawURLEncoding.DecodeString(s); err == nil {
			return hex.EncodeToString(b), nil
		}
	}
	return s, nil
}

// same reports whether two records encode alike.
func (a watchRecord) same(b watchRecord) bool {
	return a.Name == b.Name && a.Role == b.Role && a.State == b.State && a.OverlayIP == b.OverlayIP && a.OverlayIP6 == b.OverlayIP6 &&
		a.Underlay == b.Underlay && a.Relay == b.Relay && a.NebulaPort == b.NebulaPort && a.EnrollAddr == b.EnrollAddr &&
		a.SerfAddr == b.SerfAddr && a.TLSFP == b.TLSFP && a.PrevTLSFP == b.PrevTLSFP && bytes.Equal(a.TLSKey, b.TLSKey) &&
		a.Routes == b.Routes && a.Held == b.Held && a.Unheard == b.Unheard && a.NAT == b.NAT && a.OutOfPool == b.OutOfPool
}

// encodedRecord is a record and its JSON, kept between rebuilds.
type encodedRecord struct {
	rec watchRecord
	raw json.RawMessage
}

// recordCache keeps each node's encoded record between rebuilds of the
// table, so a rebuild encodes only the records that changed: at 10,000
// records, encoding them all took most of a rebuild, and a burst of
// writes rebuilds the table every few tens of milliseconds.
type recordCache struct {
	mu   sync.Mutex // one rebuild at a time
	byID map[string]encodedRecord
}

// encode is n's record's JSON, from the cache when it encodes as before.
func (c *recordCache) encode(n state.Node, next map[string]encodedRecord) json.RawMessage {
	rec := recordOf(n)
	if e, ok := c.byID[n.ID]; ok && e.rec.same(rec) {
		next[n.ID] = e
		return e.raw
	}
	e := encodedRecord{rec: rec, raw: mustJSON(rec)}
	next[n.ID] = e
	return e.raw
}

// routeWire is a record's routes as the watch carries them, compact: one
// "PREFIX:FLAGS" per route, comma-separated, flags "a" approved and "c"
// carrier (none: asked, not approved). Who approved stays on the control
// nodes.
func routeWire(n state.Node) string {
	var b strings.Builder
	for i, r := range n.Routes {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(r.Prefix.String())
		b.WriteByte(':')
		if r.Approved {
			b.WriteByte('a')
		}
		if r.Carrier {
			b.WriteByte('c')
		}

	}
	return b.String()
}

// routesFromWire reads routeWire; a route it cannot read is left out (a
// record from a newer release may say more).
func routesFromWire(s, held string) []apitype.NodeRoute {
	if s == "" {
		return nil
	}
	heldBy := strings.Split(held, ",")
	var out []apitype.NodeRoute
	for _, item := range strings.Split(s, ",") {
		pfx, flags, _ := strings.Cut(item, ":")
		p, err := netip.ParsePrefix(pfx)
		if err != nil {
			continue
		}
		out = append(out, apitype.NodeRoute{Prefix: p.String(), Exit: p == state.ExitPrefix,
			Approved: strings.Contains(flags, "a"), Carrier: strings.Contains(flags, "c"), Held: slices.Contains(heldBy, p.String())})
	}
	return out
}

// prefixWire joins prefixes with commas.
func prefixWire(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
