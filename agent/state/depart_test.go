package state

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// TestDepartureInvariant (issue 52 item 1): over random sequences of the
// commands that move a record (admissions and reuses, certificates,
// confirmations, failed, aborted and undone joins, leaves, removals,
// renewals, forgetting), every fingerprint of every former record is revoked after
// every entry, and so is every fingerprint a record held before it was
// forgotten. On main a leave kept every certificate valid.
func TestDepartureInvariant(t *testing.T) {
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			g := &lifeGen{rng: rand.New(rand.NewPCG(seed, 52)), f: bootstrapped(t), held: map[string][]string{}}
			for step := range 80 {
				c := g.next()
				err := apply(t, g.f, c)
				if err == nil {
					g.seen(c)
				}
				if bad := g.unrevoked(); len(bad) > 0 {
					t.Fatalf("step %d, %T %+v (err %v): not revoked: %v", step, c, c, err, bad)
				}
			}
		})
	}
}

// lifeGen makes commands for a few names, some valid and some not.
type lifeGen struct {
	rng   *rand.Rand
	f     *FSM
	token byte                // the last token's seed
	gen   int                 // certificate generation: fingerprints are never reused
	held  map[string][]string // every fingerprint each node id was ever seen holding
}

var lifeNames = []string{"w1", "w2", "c1"}

func (g *lifeGen) at() time.Time { return t0.Add(time.Duration(g.gen+2) * time.Minute) }

func (g *lifeGen) next() Command {
	name := lifeNames[g.rng.IntN(len(lifeNames))]
	id := "n-" + name
	role := pki.RoleWorker
	if name == "c1" {
		role = pki.RoleControl
	}
	g.gen++
	at, fp := g.at(), fmt.Sprintf("%s-%d", id, g.gen)
	switch g.rng.IntN(11) {
	case 0, 1:
		g.token++
		rec := tokenRecord(g.token, name, role)
		rec.Created, rec.Expires = at, at.Add(time.Hour)
		return MintToken{Record: rec}
	case 2, 3:
		a := joinCmd(g.token, id, name, role)
		a.Admission.At = at
		return a
	case 4:
		c := certsCmd(id)
		c.TLSFingerprint, c.NebulaFingerprint, c.At, c.Joining = "aa-"+fp, "bb-"+fp, at, true
		return c
	case 5:
		return ConfirmJoin{NodeID: id, At: at}
	case 6:
		switch g.rng.IntN(3) {
		case 0:
			return FailJoin{NodeID: id, Cause: "never confirmed", At: at}
		case 1:
			// The joiner undoes its own join (issue 52 item 10), by the
			// leaf on record.
			n, _ := g.f.Node(id)
			return AbortJoin{NodeID: id, Leaf: n.TLSFingerprint, At: at}
		}
		return AbortAdmission{NodeID: id, At: at}
	case 7:
		states := []NodeState{NodeLeft, NodeRemoved, NodeActive}
		return SetNodeState{NodeID: id, State: states[g.rng.IntN(len(states))], At: at}
	case 8:
		return RenewNebula{NodeID: id, Cert: []byte("nebula-pem-" + fp), Fingerprint: "bb-" + fp, Issued: at,
			Expires: at.Add(400 * 24 * time.Hour), At: at}
	case 9:
		n, _ := g.f.Node(id)
		return RenewTLS{NodeID: id, Cert: []byte("tls-pem-" + fp), PublicKey: n.TLSPublicKey, Fingerprint: "aa-" + fp,
			Expires: at.Add(400 * 24 * time.Hour), At: at}
	default:
		return ForgetNode{NodeID: id, At: at}
	}
}

// seen notes what the records hold after an applied command.
func (g *lifeGen) seen(Command) {
	for _, n := range g.f.Nodes() {
		for _, fp := range everyFingerprint(n) {
			if !slices.Contains(g.held[n.ID], fp) {
				g.held[n.ID] = append(g.held[n.ID], fp)
			}
		}
	}
}

// unrevoked lists what breaks the invariant: a fingerprint of a former
// record, or of a record gone, that is not revoked.
func (g *lifeGen) unrevoked() []string {
	revoked := map[string]bool{}
	for _, r := range g.f.Revocations() {
		revoked[r.NodeID+"/"+r.Fingerprint] = true
	}
	var bad []string
	for id, fps := range g.held {
		n, ok := g.f.Node(id)
		if ok && !n.State.Former() {
			continue
		}
		for _, fp := range fps {
			if ok && !slices.Contains(everyFingerprint(n), fp) && n.State != NodeJoining {
				// A record reused since: what it holds now is its own.
				continue
			}
			if !revoked[id+"/"+fp] {
				bad = append(bad, fmt.Sprintf("%s (%s) %s", id, n.State, fp))
			}
		}
	}
	slices.Sort(bad)
	return bad
}

// TestForgetFormerNodes (issue 52 item 2): any former record is forgotten
// on request, its name and overlay IP freed, every revocation kept; one a
// release before issue 52 recorded left without revoking is revoked as it
// goes.
func TestForgetFormerNodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		to   func(f *FSM, id string) error
	}{
		{"left", func(f *FSM, id string) error {
			return apply(t, f, SetNodeState{NodeID: id, State: NodeLeft, At: t0.Add(3 * time.Minute)})
		}},
		{"removed", func(f *FSM, id string) error {
			return apply(t, f, SetNodeState{NodeID: id, State: NodeRemoved, At: t0.Add(3 * time.Minute)})
		}},
		{"legacy-left", func(f *FSM, id string) error {
			n := f.s.Nodes[id]
			n.State = NodeLeft // as a release before issue 52 left it: nothing revoked
			f.s.Nodes[id] = n
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := bootstrapped(t)
			mustApply(t, f, MintToken{Record: tokenRecord(1, "w1", pki.RoleWorker)})
			mustApply(t, f, admitCmd(1, "n-w1", "w1", pki.RoleWorker, "10.42.0.2"))
			if err := tc.to(f, "n-w1"); err != nil {
				t.Fatal(err)
			}
			mustApply(t, f, ForgetNode{NodeID: "n-w1", At: t0.Add(4 * time.Minute), Actor: "uid:0"})
			if _, ok := f.Node("n-w1"); ok {
				t.Fatal("the record is still there")
			}
			if f.IPAllocated(netip.MustParseAddr("10.42.0.2")) {
				t.Fatal("its overlay IP is still allocated")
			}
			if got := revokedFPs(f, "n-w1"); len(got) != 2 {
				t.Fatalf("revocations after forget: %v, want both certificates", got)
			}
			if a := f.Audit(); a[len(a)-1].Code != codes.EventNodeForgotten || a[len(a)-1].Actor != "uid:0" {
				t.Fatalf("audit %+v", a[len(a)-1])
			}
		})
	}
}
