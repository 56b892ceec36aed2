package control

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/state"
	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// PathGossipKeys is where a member fetches the cluster's gossip keyring
// (any member whose record is active; never over gossip).
const PathGossipKeys = "/v1/gossip/keys"

// DefaultKeyStepTimeout bounds how long a rotation waits for every live
// member to report one step done.
const DefaultKeyStepTimeout = 30 * time.Second

// keyRenotify is how often a waiting rotation repeats its "keys changed"
// notification, for members that heard it before their raft state (or
// their fetch) had the step.
const keyRenotify = time.Second

// GossipKeys is the cluster's gossip keyring as a member fetches it. The
// keys are secret: this body is never logged.
type GossipKeys struct {
	Keys    [][]byte  `json:"keys"` // primary first
	Rotated time.Time `json:"rotated,omitzero"`
}

// KeyReport is what one gossip member reports about itself: its status as
// this node's gossip sees it, and the KeyringID it runs (from its tags).
// Only the CA report is signed (CASig); the rest are hints.
type KeyReport struct {
	Name, ID string
	Alive    bool
	Keyring  string
	CA       string // the member's "ca" tag: CAReport of what it runs (CA rotation)
	CASig    []byte // the member's pki.Attest of CA (kind pki.AttestCA, nonce its node id)
	// Legacy is a member gossiping from outside the overlay: the previous
	// release, which signs nothing; its tags and answers are taken as
	// they were.
	Legacy bool
}

// KeyringQueryName is the gossip query a rotation asks every member
// between steps: "do you run keyring kr?". A member answers once it does
// (within the query's deadline), with its node id. The answer travels
// straight back to the asker, so it never waits on a broadcast the way a
// tag report does (serf's SetTags can wait out its 5 s BroadcastTimeout
// after the members already see the tag).
const KeyringQueryName = "meshd-keyring"

// KeyringQuery is the keyring query's payload (Keyring and a fresh
// Nonce) and a member's answer (Keyring, the member's node ID, and Sig:
// its pki.Attest of KeyringStatement, kind pki.AttestKeyring, bound to
// the nonce). The previous release asks without a nonce and answers
// without a signature.
type KeyringQuery struct {
	Keyring string `json:"kr"`
	ID      string `json:"id,omitempty"`
	Nonce   []byte `json:"n,omitempty"`
	Sig     []byte `json:"sig,omitempty"`
}

// KeyRotation is the outcome of a rotation.
type KeyRotation struct {
	Keys    int
	Primary string // state.KeyID of the new primary
	Took    time.Duration
	Members int // live members that reported the last step
}

// RotateKeys replaces the cluster's gossip key: a fresh 32-byte key goes
// through install (old primary + new), use (new primary + old) and drop
// (new only), each a SetGossipKeys raft entry. Between steps it waits,
// up to the step timeout, until every live member with an active record
// reports the step's keyring; a member that does not is named in
// codes.KeyRotationStalled and the rotation stops there (every node still
// shares a key; running it again finishes the job). Members without an
// active record (a removed node) are never waited for, and cannot fetch
// the key. Rotations on this node run one at a time; one started at the
// same moment on another control node fails with codes.Busy.
func (p *Plane) RotateKeys(ctx context.Context, actor string) (KeyRotation, error) {
	p.rotating.Lock()
	defer p.rotating.Unlock()
	start := p.now()
	if err := p.SyncRead(ctx); err != nil {
		return KeyRotation{}, err
	}
	cl, ok := p.raft.FSM().Cluster()
	if !ok || len(cl.GossipKeys) == 0 {
		return KeyRotation{}, codes.Wrap(codes.NotInCluster, errors.New("no cluster gossip key to rotate"))
	}
	fresh := make([]byte, state.GossipKeySize)
	if _, err := rand.Read(fresh); err != nil {
		return KeyRotation{}, codes.Wrap(codes.Internal, fmt.Errorf("generate gossip key: %w", err))
	}
	old := cl.GossipKeys[0]
	cur := cl.GossipKeys
	var members int
	for _, s := range []struct {
		step state.KeyStep
		keys [][]byte
	}{
		{state.KeyInstall, [][]byte{old, fresh}},
		{state.KeyUse, [][]byte{fresh, old}},
		{state.KeyDrop, [][]byte{fresh}},
	} {
		err := p.Write(ctx, &state.SetGossipKeys{Keys: s.keys, Step: s.step, Expect: state.KeyringID(cur),
			At: p.now(), Actor: actor})
		if err != nil {
			return KeyRotation{}, fmt.Errorf("gossip key rotation, step %s: %w", s.step, err)
		}
		cur = s.keys
		p.hooks.Poke()
		if members, err = p.awaitKeyStep(ctx, s.step, state.KeyringID(cur)); err != nil {
			p.log.Warn("gossip key rotation stalled", "code", codes.OrInternal(err), "step", s.step, "err", err)
			return KeyRotation{}, err
		}
		p.log.Info("gossip key rotation step done", "step", s.step, "members", members,
			"primary", state.KeyID(cur[0]), "took", p.now().Sub(start).Round(time.Millisecond))
	}
	r := KeyRotation{Keys: 1, Primary: state.KeyID(fresh), Took: p.now().Sub(start), Members: members}
	p.log.Info("gossip key rotated", "code", codes.EventKeysRotated, "primary", r.Primary, "actor", actor,
		"took", r.Took.Round(time.Millisecond))
	return r, nil
}

// awaitKeyStep waits until every live member with an active record
// reports keyring want, telling the cluster to look again every
// keyRenotify. A member reports it either in its gossip tags or by
// answering the rotation's keyring query (KeyringQueryName), whichever
// comes first. It returns how many members reported.
func (p *Plane) awaitKeyStep(ctx context.Context, step state.KeyStep, want string) (int, error) {
	timeout := p.cfg.KeyStepTimeout
	if timeout <= 0 {
		timeout = DefaultKeyStepTimeout
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	answered := p.askKeyring(ctx, want, timeout)
	defer answered.stop()
	reach := newReachCache(ctx, p.hooks.Reach, p.log)
	defer reach.wait()
	lastNotify := time.Time{}
	for {
		done, lagging := p.keyLaggers(want, answered.nonce, answered.get(), reach)
		if len(lagging) == 0 {
			return done, nil
		}
		if time.Since(lastNotify) >= keyRenotify {
			if err := p.hooks.NotifyKeys(); err != nil {
				p.log.Debug("gossip keys notification not sent", "err", err)
			}
			lastNotify = time.Now()
		}
		select {
		case <-ctx.Done():
			return done, codes.Wrap(codes.KeyRotationStalled, fmt.Errorf("step %s: %w; not reported by %s",
				step, context.Cause(ctx), strings.Join(lagging, ", ")))
		case <-deadline.C:
			return done, codes.Wrap(codes.KeyRotationStalled, fmt.Errorf("step %s not reported within %s by %s",
				step, timeout, strings.Join(lagging, ", ")))
		case <-answered.changed:
		case <-poll.C:
		}
	}
}

// keyAnswers are the answers to one keyring query by member name, of the
// members that answered they run the asked keyring.
type keyAnswers struct {
	nonce   []byte
	mu      sync.Mutex
	got     map[string]KeyringQuery
	changed chan struct{} // a new answer came (buffered 1)
	stop    func()        // ends the query and waits for it
}

func (a *keyAnswers) get() map[string]KeyringQuery {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.got)
}

// askKeyring asks every member, over gossip, to answer once it runs
// keyring want, collecting answers until bound passes or stop is called.
func (p *Plane) askKeyring(ctx context.Context, want string, bound time.Duration) *keyAnswers {
	a := &keyAnswers{nonce: newQueryNonce(), got: map[string]KeyringQuery{}, changed: make(chan struct{}, 1)}
	payload, _ := json.Marshal(KeyringQuery{Keyring: want, Nonce: a.nonce})
	qctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := p.hooks.AskMembers(qctx, KeyringQueryName, payload, bound, func(answers map[string][]byte) bool {
			a.mu.Lock()
			defer a.mu.Unlock()
			for from, b := range answers {
				var got KeyringQuery
				if _, ok := a.got[from]; ok || json.Unmarshal(b, &got) != nil || got.Keyring != want || got.ID == "" {
					continue
				}
				a.got[from] = got
				select {
				case a.changed <- struct{}{}:
				default:
				}
			}
			return false // the waiter decides when it has enough, and stops the query
		})
		if err != nil && qctx.Err() == nil {
			p.log.Debug("keyring query not asked; waiting on the members' tags alone", "err", err)
		}
	}()
	a.stop = func() { cancel(); wg.Wait() }
	return a
}

// keyLaggers are the live members with an active record that do not
// report want yet (by name), and how many do. A member reports want by
// answering the keyring query (answered, by member name) with its
// signature, checked against its record's TLS key (attested). A member is
// waited for while gossip shows it alive and a direct probe of its
// record's overlay address does not find it down (reach): a member taken
// by an attacker can make gossip show another, stopped, node alive, but
// cannot answer for that node's overlay address (issue 27). A member
// counts only if its id and name match an active record: a removed node,
// or one with no record, cannot hold a rotation up, nor stand in for
// another. A member on the previous release (KeyReport.Legacy) signs
// nothing: its answer or its tag counts as it did.
func (p *Plane) keyLaggers(want string, nonce []byte, answered map[string]KeyringQuery, reach *reachCache) (int, []string) {
	reports := p.hooks.KeyReports()
	done := 0
	var lagging []string
	for _, n := range p.raft.FSM().Nodes() {
		if n.State != state.NodeActive {
			continue
		}
		i := slices.IndexFunc(reports, func(r KeyReport) bool { return r.Name == n.Name && r.ID == n.ID })
		legacy := i >= 0 && reports[i].Legacy
		if a, ok := answered[n.Name]; ok && a.ID == n.ID &&
			(legacy || attested(n, pki.AttestKeyring, nonce, KeyringStatement(n.ID, want), a.Sig)) {
			done++
			continue
		}
		if i < 0 || !reports[i].Alive {
			continue
		}
		if legacy && reports[i].Keyring == want {
			done++
			continue
		}
		if !legacy && reach.get(n.OverlayIP) == reachDown {
			continue
		}
		lagging = append(lagging, n.Name)
	}
	return done, lagging
}

// strictReadWait bounds how long a strict read waits for this node's FSM
// to reach the leader's index.
const strictReadWait = 2 * time.Second

// strictRead is a read index that does not wait for a leader and never
// answers from stale state: a control node cut off from raft (a minority
// partition, or one just removed from raft that does not know it yet)
// answers codes.NoLeader at once, so a worker asks the next control node
// instead of taking stale records or keys from it.
func (p *Plane) strictRead(ctx context.Context) error {
	if err := p.CaughtUp(ctx); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, strictReadWait)
	defer cancel()
	if err := p.readIndexOnce(ctx); err != nil {
		if retryable(err) || errors.Is(err, context.DeadlineExceeded) {
			return codes.Wrap(codes.NoLeader, fmt.Errorf("not in touch with a raft leader: %w", err))
		}
		return err
	}
	return nil
}

// handleGossipKeys gives an active (or joining, certified) member the
// cluster's gossip keyring. A caller without such a record (removed, left,
// failed, unknown) is refused: fail closed.
func (p *Plane) handleGossipKeys(w http.ResponseWriter, r *http.Request, c Caller) {
	if err := p.strictRead(r.Context()); err != nil {
		writeError(w, err)
		return
	}
	n, ok := p.raft.FSM().Node(c.NodeID)
	if !ok || (n.State != state.NodeActive && n.State != state.NodeJoining) || n.Name != c.Name {
		writeError(w, codes.Wrap(codes.NodeUnknown, fmt.Errorf("no active node %s", c.NodeID)))
		return
	}
	cl, ok := p.raft.FSM().Cluster()
	if !ok {
		writeError(w, codes.Wrap(codes.NotInCluster, errors.New("no cluster yet")))
		return
	}
	apitype.WriteJSON(w, http.StatusOK, GossipKeys{Keys: cl.GossipKeys, Rotated: cl.GossipKeysRotated})
}
