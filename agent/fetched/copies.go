package fetched

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/codes"
)

// fetchBudget bounds one fetch from the control nodes (all of them in
// turn: control.Client.AskSeeds).
const fetchBudget = 5 * time.Second

// Copies are a worker's copies of what the control nodes hold in raft,
// fetched over mTLS: the node list (kept in statedir.NodesFile across a
// restart), the revocation list, the gossip keyring, the CA trust bundles
// and its own renewed certificates. A worker has no raft; these copies
// are how it follows raft's decisions. Each fetch is bounded
// (fetchBudget) and asks the control nodes in the order Seeds gives.
type Copies struct {
	client    *control.Client
	nodeID    string
	joinSeeds []string // the seeds the join response named: before the first list, and for the own TLS leaf
	home      string   // the seed this node enrolled through, asked first (control.HomeFirst); "" if unknown
	stateDir  string
	log       *slog.Logger

	nodes   nodeList
	revoked revocations
	keys    dueCopy
	ca      dueCopy
	follow  followState // the watch stream (watch.go)
	// standing is whether the cluster still knows this node
	// (standing.go): the stream's and strict reads' answers feed it, and
	// while it is removed the copies ask at most once per RemovedRetry.
	standing *Standing
}

// New holds no copy yet; Load reads the node list a worker saved before
// a restart. home is the seed the node enrolled through ("" if unknown).
// st is the node's standing (nil: one of its own, on time.Now).
func New(client *control.Client, nodeID string, joinSeeds []string, home, stateDir string, st *Standing, log *slog.Logger) *Copies {
	if st == nil {
		st = NewStanding(nil, log)
	}
	return &Copies{client: client, nodeID: nodeID, joinSeeds: joinSeeds, home: home, stateDir: stateDir, standing: st, log: log}
}

// dueCopy spaces the fetches of one copy: at once when told it changed,
// otherwise at most once per interval.
type dueCopy struct {
	mu      sync.Mutex
	fetched time.Time
}

func (d *dueCopy) due(told bool, every time.Duration) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return told || time.Since(d.fetched) >= every
}

func (d *dueCopy) done() {
	d.mu.Lock()
	d.fetched = time.Now()
	d.mu.Unlock()
}

// Refresh brings the node list and the revocations up to date. The watch
// stream (watch.go) keeps them so: while it is healthy a refresh asks
// nothing, unless told of a change and the stream has brought none within
// toldGrace (5 s). Otherwise, and once no stream has been healthy for
// watchGrace, it asks for one change after a read index (strict=1): at
// once when told, at most once a second when not. changed says either
// copy changed; the error is the node list's, if any: what a join's
// confirmation waits on.
//
// A node judged removed (standing.go) asks nothing until RemovedRetry
// after its last ask, told or not, and then one strict change of every
// control node in turn: one round.
func (c *Copies) Refresh(ctx context.Context, told bool) (changed bool, err error) {
	if c.standing.Removed() {
		if !c.standing.Due() {
			return false, c.standing.Err()
		}
		return c.strictChange(ctx, true)
	}
	if c.legacy() {
		return c.legacyRefresh(ctx, told) // legacy.go: a cluster without the watch
	}
	healthy, recent, downFor := c.streaming()
	switch {
	case healthy && (!told || recent):
		return false, nil
	case !healthy && !told && downFor < watchGrace:
		return false, c.NodeListErr()
	}
	return c.strictChange(ctx, told)
}

// GossipKeys is the cluster's gossip keyring: the watch stream's copy
// once it brought one; before that (or with no healthy stream, when
// told) GET /v1/gossip/keys, at once when told, otherwise at most once a
// second. ok is false when there is none or the fetch failed (logged
// without the body).
func (c *Copies) GossipKeys(ctx context.Context, told bool) (control.GossipKeys, bool) {
	healthy, _, _ := c.streaming()
	c.follow.mu.Lock()
	held := c.follow.keys
	c.follow.mu.Unlock()
	if held != nil && (healthy || !told) {
		return *held, true
	}
	if c.standing.Removed() || !c.keys.due(told, time.Second) {
		return control.GossipKeys{}, false
	}
	fctx, cancel := context.WithTimeout(ctx, fetchBudget)
	defer cancel()
	var gk control.GossipKeys
	if err := c.client.AskSeeds(fctx, c.Seeds(), control.PathGossipKeys, &gk); err != nil {
		c.log.Debug("gossip keys not refreshed", "code", codes.OrInternal(err)) // never the body
		return control.GossipKeys{}, false
	}
	c.keys.done()
	return gk, true
}

// CABundle is the CA trust bundles and the rotation phase: the watch
// stream's copy once it brought one; before that (or with no healthy
// stream, when told) GET /v1/ca/bundle, at once when told, otherwise at
// most every 5 s.
func (c *Copies) CABundle(ctx context.Context, told bool) (control.CABundle, bool) {
	healthy, _, _ := c.streaming()
	c.follow.mu.Lock()
	held := c.follow.ca
	c.follow.mu.Unlock()
	if held != nil && (healthy || !told) {
		return *held, true
	}
	if c.standing.Removed() || !c.ca.due(told, 5*time.Second) {
		return control.CABundle{}, false
	}
	fctx, cancel := context.WithTimeout(ctx, fetchBudget)
	defer cancel()
	var b control.CABundle
	if err := c.client.AskSeeds(fctx, c.Seeds(), control.PathCABundle, &b); err != nil {
		c.log.Debug("CA bundle not refreshed", "err", err)
		return control.CABundle{}, false
	}
	c.ca.done()
	return b, true
}

// OwnNebulaCert asks the control nodes for this node's current Nebula
// certificate, when due (a renewal or a CA rotation's reissue may be
// waiting); nil when not due.
func (c *Copies) OwnNebulaCert(ctx context.Context, due bool) ([]byte, error) {
	if !due {
		return nil, nil
	}
	if err := c.standing.Err(); err != nil {
		return nil, err // removed: nothing to renew
	}
	fctx, cancel := context.WithTimeout(ctx, fetchBudget)
	defer cancel()
	var body control.NebulaCertResponse
	err := c.client.AskSeeds(fctx, c.Seeds(), control.PathNebulaCert, &body)
	return body.Cert, err
}

// OwnTLSCert asks the control nodes the join named for this node's
// current TLS leaf (GET /v1/self/tls-cert).
func (c *Copies) OwnTLSCert(ctx context.Context) ([]byte, error) {
	if err := c.standing.Err(); err != nil {
		return nil, err // removed: nothing to renew
	}
	fctx, cancel := context.WithTimeout(ctx, fetchBudget)
	defer cancel()
	var body control.TLSCertResponse
	err := c.client.AskSeeds(fctx, c.joinSeeds, control.PathTLSCert, &body)
	return body.Cert, err
}

// NodeRows is `meshctl nodes` on a worker: a control node's rows.
func (c *Copies) NodeRows(ctx context.Context) ([]apitype.Node, error) {
	var rows []apitype.Node
	err := c.client.AskSeeds(ctx, c.Seeds(), control.PathNodes, &rows)
	return rows, err
}

// Settle has nothing to wait for on a worker: its node list follows
// its watch stream.
func (c *Copies) Settle(context.Context) error { return nil }
