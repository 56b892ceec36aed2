package desired

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/meshd/meshd/mesh"
	"github.com/meshd/meshd/pki"
)

// TestTrackerMatchesCompute is the property test of the incremental
// overlay (issue 54 item 2): over random sequences of record changes
// (moved, added, removed, gone, role, relay, routes, IPv6, no underlay,
// order) and blocklist changes, the tracker's overlay equals Compute of
// the same inputs after every step, its Routes equal Routes, and the
// change Update returns, applied to the overlay before, gives Compute's
// overlay after: what mesh.Apply is handed is the difference. A step
// Update refuses (a tangle: two records with one name or address; this
// node's NAT changed) is followed by Reset, as the agent does. Each step
// takes Update or UpdateChanged (handed only the records that changed),
// at random: both, and a mix of the two, keep Compute's overlay.
func TestTrackerMatchesCompute(t *testing.T) {
	for seed := range uint64(60) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 54))
			w := newWorld(rng)
			var tr Tracker
			in := w.inputs()
			if !tr.Reset(in) {
				t.Fatal("Reset refused untangled inputs")
			}
			checkTracker(t, &tr, in, "reset")
			before := Compute(in)
			tracking := true // the last Reset held
			followed := 0
			defer func() {
				if followed < 100 {
					t.Errorf("Update followed %d steps of 150", followed)
				}
			}()
			pick := rand.New(rand.NewPCG(seed, 2)) // Update or UpdateChanged, step by step
			for step := range 150 {
				what := w.step()
				last := in
				in = w.inputs()
				var ch mesh.Change
				var ok bool
				if pick.IntN(2) == 0 {
					ch, ok = tr.Update(in)
				} else {
					put, del := recordDiff(last.Records, in.Records)
					ch, ok = tr.UpdateChanged(in, put, del)
				}
				if !ok {
					if tracking && w.tangled() == "" && what != "nat" {
						t.Fatalf("step %d (%s): Update refused untangled inputs", step, what)
					}
					tracking = tr.Reset(in)
					if tracking != (w.tangled() == "") {
						t.Fatalf("step %d (%s): Reset said %v with tangle %q", step, what, tracking, w.tangled())
					}
					if w.tangled() == "" {
						checkTracker(t, &tr, in, what)
					}
					before = Compute(in)
					continue
				}
				if w.tangled() != "" {
					t.Fatalf("step %d (%s): Update followed tangled inputs (%s)", step, what, w.tangled())
				}
				checkTracker(t, &tr, in, what)
				followed++
				after := Compute(in)
				if got := applied(before, ch); !sameOverlay(got, after) {
					t.Fatalf("step %d (%s): the change %+v applied to the overlay before gives\n%+v\nCompute gives\n%+v", step, what, ch, got, after)
				}
				before = after
			}
		})
	}
}

// recordDiff is what a change log hands UpdateChanged: the records of
// now added or changed since was, and the ids of was no longer in now.
func recordDiff(was, now []Record) (put []Record, del []string) {
	old := map[string]Record{}
	for _, r := range was {
		old[r.ID] = r
	}
	for _, r := range now {
		if o, ok := old[r.ID]; !ok || !reflect.DeepEqual(o, r) {
			put = append(put, r)
		}
		delete(old, r.ID)
	}
	for id := range old {
		del = append(del, id)
	}
	return put, del
}

func checkTracker(t *testing.T, tr *Tracker, in Inputs, what string) {
	t.Helper()
	want := Compute(in)
	if got := tr.Overlay(); !sameOverlay(got, want) {
		t.Fatalf("after %s: tracker\n%+v\nCompute\n%+v", what, got, want)
	}
	if got, want := tr.Routes(in), Routes(in, want); !reflect.DeepEqual(got, want) {
		t.Fatalf("after %s: tracker's routes\n%+v\nRoutes\n%+v", what, got, want)
	}
}

// sameOverlay compares as the agent's whole-config comparison does, the
// blocklist as a set (mesh keeps it in its own order).
func sameOverlay(a, b Overlay) bool {
	a.Blocklist, b.Blocklist = slices.Sorted(slices.Values(a.Blocklist)), slices.Sorted(slices.Values(b.Blocklist))
	if len(a.Blocklist) == 0 && len(b.Blocklist) == 0 {
		a.Blocklist, b.Blocklist = nil, nil
	}
	return reflect.DeepEqual(a, b)
}

// applied is o with ch applied, as mesh.Apply applies it.
func applied(o Overlay, ch mesh.Change) Overlay {
	o.StaticHosts = maps.Clone(o.StaticHosts)
	for ip, a := range ch.StaticHosts {
		if a == nil {
			delete(o.StaticHosts, ip)
		} else {
			o.StaticHosts[ip] = a
		}
	}
	norm := func(l []netip.Addr) []netip.Addr {
		if len(l) == 0 {
			return nil
		}
		return l
	}
	if ch.Lighthouses != nil {
		o.Lighthouses = ch.Lighthouses
		if len(o.Lighthouses) == 0 {
			o.Lighthouses = nil
		}
	}
	if ch.Relays != nil {
		o.Relays = norm(ch.Relays)
	}
	if ch.Roaming != nil {
		o.Roaming = norm(ch.Roaming)
	}
	o.Blocklist = append(slices.DeleteFunc(slices.Clone(o.Blocklist), func(fp string) bool { return slices.Contains(ch.Unblock, fp) }), ch.Block...)
	return o
}

// world is a cluster seen from one node, changed at random.
type world struct {
	rng   *rand.Rand
	self  Inputs
	recs  []Record
	gone  []string
	block []string
	next  int
	clash string // the id of a record made to clash with another
}

func newWorld(rng *rand.Rand) *world {
	w := &world{rng: rng}
	w.self = Inputs{SelfName: "self", SelfOverlay: netip.MustParseAddr("10.42.255.1"), RecordsKnown: true,
		SelfNoNAT: rng.IntN(4) == 0, SelfUnderlay: netip.MustParseAddr("192.0.2.200")}
	if rng.IntN(2) == 0 {
		w.self.SelfOverlay6 = netip.MustParsePrefix("fd42::/64")
	}
	if rng.IntN(3) == 0 {
		w.self.Exit = "n5"
		w.self.Seeds = []netip.Addr{netip.MustParseAddr("192.0.2.1")}
	}
	if rng.IntN(3) == 0 {
		w.self.SelfAsked = []netip.Prefix{netip.MustParsePrefix("172.16.3.0/24")}
	}
	for range 3 + rng.IntN(20) {
		w.recs = append(w.recs, w.newRecord())
	}
	return w
}

func (w *world) newRecord() Record {
	i := w.next
	w.next++
	r := Record{ID: fmt.Sprintf("id-%d", i), Name: fmt.Sprintf("n%d", i), Role: pki.RoleWorker,
		Overlay: netip.AddrFrom4([4]byte{10, 42, byte(i >> 8), byte(i)})}
	switch w.rng.IntN(8) {
	case 0:
		r.Role = pki.RoleControl
	case 1:
		r.Role = pki.RoleNebula
	}
	if w.rng.IntN(2) == 0 {
		r.Overlay6 = netip.AddrFrom16([16]byte{0xfd, 0x42, 15: byte(i), 14: byte(i >> 8)})
	}
	w.move(&r)
	r.Relay = w.rng.IntN(4) == 0
	w.route(&r)
	return r
}

func (w *world) move(r *Record) {
	if w.rng.IntN(6) == 0 {
		r.Underlay = netip.AddrPort{} // none on record
		return
	}
	r.Underlay = netip.AddrPortFrom(netip.AddrFrom4([4]byte{172, 16, byte(w.rng.IntN(4)), byte(w.rng.IntN(256))}), 4242)
}

func (w *world) route(r *Record) {
	r.Routes = nil
	if w.rng.IntN(3) != 0 {
		return
	}
	p := netip.PrefixFrom(netip.AddrFrom4([4]byte{172, 16, byte(w.rng.IntN(4)), 0}), 24)
	r.Routes = append(r.Routes, RecordRoute{Prefix: p, Carrier: w.rng.IntN(2) == 0})
	if w.rng.IntN(4) == 0 {
		r.Routes = append(r.Routes, RecordRoute{Prefix: exitPrefix, Exit: true})
	}
}

// step changes one thing and says what.
func (w *world) step() string {
	pick := func() *Record { return &w.recs[w.rng.IntN(len(w.recs))] }
	if why, id := w.tangle(); why != "" { // one of the two clashing records leaves
		w.recs = slices.DeleteFunc(w.recs, func(r Record) bool { return r.ID == id })
		return "untangled"
	}
	switch k := w.rng.IntN(14); {
	case k < 3 && len(w.recs) > 0:
		w.move(pick())
		return "moved"
	case k < 5:
		w.recs = slices.Insert(w.recs, w.rng.IntN(len(w.recs)+1), w.newRecord())
		return "added"
	case k < 7 && len(w.recs) > 1:
		i := w.rng.IntN(len(w.recs))
		w.block = append(w.block, "fp-"+w.recs[i].ID)
		w.recs = slices.Delete(w.recs, i, i+1)
		return "removed, its certificate blocked"
	case k == 7 && len(w.recs) > 0:
		r := pick()
		if i := slices.Index(w.gone, r.ID); i >= 0 {
			w.gone = slices.Delete(w.gone, i, i+1)
			return "no longer gone"
		}
		w.gone = append(w.gone, r.ID)
		return "gone"
	case k == 8 && len(w.recs) > 0:
		r := pick()
		r.Role = []pki.Role{pki.RoleControl, pki.RoleWorker, pki.RoleNebula}[w.rng.IntN(3)]
		return "role"
	case k == 9 && len(w.recs) > 0:
		r := pick()
		r.Relay = !r.Relay
		return "relay"
	case k == 10 && len(w.recs) > 0:
		w.route(pick())
		return "routes"
	case k == 11 && len(w.block) > 0:
		w.block = slices.Delete(w.block, 0, 1)
		return "unblocked"
	case k == 12 && len(w.recs) > 1:
		w.rng.Shuffle(len(w.recs), func(i, j int) { w.recs[i], w.recs[j] = w.recs[j], w.recs[i] })
		return "reordered"
	case k == 13 && len(w.recs) > 1 && w.rng.IntN(4) == 0:
		a, b := pick(), pick()
		if w.rng.IntN(2) == 0 {
			a.Name = b.Name
			return "a name twice"
		}
		a.Overlay = b.Overlay
		return "an overlay address twice"
	case k == 13 && w.rng.IntN(8) == 0:
		w.self.SelfNoNAT = !w.self.SelfNoNAT
		return "nat"
	}
	return "nothing"
}

// inputs are the world's inputs, copied afresh as the agent reads them.
func (w *world) inputs() Inputs {
	in := w.self
	for _, r := range w.recs {
		r.Routes = slices.Clone(r.Routes)
		in.Records = append(in.Records, r)
	}
	in.Gone, in.Blocklist = slices.Clone(w.gone), slices.Clone(w.block)
	return in
}

// tangled says why the world's records are ones Compute resolves by a
// map's order (two counted records with one name or address), or "".
func (w *world) tangled() string {
	why, _ := w.tangle()
	return why
}

// tangle is tangled's answer, and the id of a record in the tangle.
func (w *world) tangle() (string, string) {
	names, addrs := map[string]bool{}, map[netip.Addr]bool{}
	for _, r := range w.recs {
		if r.Name == w.self.SelfName || slices.Contains(w.gone, r.ID) {
			continue
		}
		if names[r.Name] {
			return "name " + r.Name, r.ID
		}
		names[r.Name] = true
		for _, a := range []netip.Addr{r.Overlay, r.Overlay6} {
			if a.IsValid() && addrs[a] {
				return "address " + a.String(), r.ID
			}
			addrs[a] = true
		}
	}
	return "", ""
}
