//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// The token ledger as a linearizable object, checked with porcupine.
//
// Every admit, join, revoke and token listing a test makes is recorded with
// its call and return times and its result (history.do); checkLedger then
// asks porcupine whether some order of them, each taking effect between its
// call and its return, explains every result under ledgerModel:
//
//   - admit NAME returns a token id that did not exist, which is then
//     unused; an admit refused (any code) minted nothing;
//   - join with a token: success uses it (unused → used); TokenConsumed
//     means it was used, TokenRevoked that it was revoked; any other failure
//     (NoLeader, CAHolderDown, the answer lost) may or may not have used it;
//   - revoke: success means it was unused or revoked and is now revoked;
//     TokenConsumed that it was used; NoLeader that nothing changed; any
//     other failure may or may not have revoked it;
//   - a listing returns the state of every token the history knows.
//
// "May or may not" is exact: the model's state is the set of ledgers the
// history so far allows, so porcupine's one-state steps explore both.

// ledgerOp is one operation's input.
type ledgerOp struct {
	Kind string // admit, join, revoke, list
	On   string // the node it ran on
	Name string // admit: the name; join: the joining node's name
	ID   string // join, revoke: the token's id
}

// ledgerOut is one operation's output.
type ledgerOut struct {
	Code   codes.Code        // "" on success
	ID     string            // admit: the id minted
	Tokens map[string]string // list: id → state, for the ids the history minted
}

func (o ledgerOut) ok() bool { return o.Code == "" }

// A ledger state is a canonical string, "id=state,id=state" sorted, and the
// model's state is the set of them the history allows, as one string
// joined with "|" (comparable with ==, as porcupine wants).
func ledgerDecode(s string) map[string]string {
	m := map[string]string{}
	if s == "" {
		return m
	}
	for kv := range strings.SplitSeq(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

func ledgerEncode(m map[string]string) string {
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		kv = append(kv, k+"="+m[k])
	}
	return strings.Join(kv, ",")
}

// ledgerStep is what one ledger allows: the ledgers after op with result out.
func ledgerStep(l map[string]string, op ledgerOp, out ledgerOut) []map[string]string {
	with := func(id, st string) map[string]string {
		n := maps.Clone(l)
		n[id] = st
		return n
	}
	st, known := l[op.ID]
	switch op.Kind {
	case "admit":
		if !out.ok() {
			return []map[string]string{l}
		}
		if _, dup := l[out.ID]; dup {
			return nil // an id minted twice
		}
		return []map[string]string{with(out.ID, "unused")}
	case "join":
		switch {
		case out.ok():
			if known && st == "unused" {
				return []map[string]string{with(op.ID, "used")}
			}
			return nil // a used or revoked token admitted a node
		case out.Code == codes.TokenConsumed:
			if st == "used" {
				return []map[string]string{l}
			}
			return nil
		case out.Code == codes.TokenRevoked:
			if st == "revoked" {
				return []map[string]string{l}
			}
			return nil
		}
		if st == "unused" {
			return []map[string]string{l, with(op.ID, "used")}
		}
		return []map[string]string{l}
	case "revoke":
		switch {
		case out.ok():
			if st == "unused" || st == "revoked" {
				return []map[string]string{with(op.ID, "revoked")}
			}
			return nil
		case out.Code == codes.TokenConsumed:
			if st == "used" {
				return []map[string]string{l}
			}
			return nil
		case out.Code == codes.NoLeader:
			return []map[string]string{l}
		}
		if st == "unused" {
			return []map[string]string{l, with(op.ID, "revoked")}
		}
		return []map[string]string{l}
	case "list":
		if !out.ok() {
			return []map[string]string{l}
		}
		for id, want := range l {
			if out.Tokens[id] != want {
				return nil
			}
		}
		return []map[string]string{l}
	}
	return nil
}

var ledgerModel = porcupine.Model{
	Init: func() any { return "" }, // one possible ledger: the empty one
	Step: func(state, input, output any) (bool, any) {
		next := map[string]bool{}
		for s := range strings.SplitSeq(state.(string), "|") {
			for _, l := range ledgerStep(ledgerDecode(s), input.(ledgerOp), output.(ledgerOut)) {
				next[ledgerEncode(l)] = true
			}
		}
		if len(next) == 0 {
			return false, state
		}
		return true, strings.Join(slices.Sorted(maps.Keys(next)), "|")
	},
	DescribeOperation: func(input, output any) string {
		op, out := input.(ledgerOp), output.(ledgerOut)
		res := "ok"
		if !out.ok() {
			res = string(out.Code)
		}
		return fmt.Sprintf("%s %s%s on %s → %s %s", op.Kind, op.Name, op.ID, op.On, res, out.ID)
	},
}

func jsonDecode(s string, v any) error { return json.Unmarshal([]byte(s), v) }

// history records operations from any goroutine.
type history struct {
	mu     sync.Mutex
	start  time.Time
	ops    []porcupine.Operation
	known  map[string]bool   // token ids admits returned
	tokens map[string]string // id → the token an admit returned
}

func newHistory() *history {
	return &history{start: time.Now(), known: map[string]bool{}, tokens: map[string]string{}}
}

// codeOf is the code of the error a failed meshctl call printed on
// stderr (the first line that begins with a code; warnings before it,
// such as a join's SeedSlow, are "warning CODE: ..."), or "unknown" when
// it printed none.
func codeOf(exit int, stderr string) codes.Code {
	if exit == 0 {
		return ""
	}
	for line := range strings.SplitSeq(stderr, "\n") {
		if c, _, ok := strings.Cut(line, ": "); ok && len(c) == 13 && c[0] == 'X' {
			return codes.Code(c)
		}
	}
	return "unknown"
}

// do runs op on nd through meshctl, records it, and returns its result.
func (h *history) do(t testing.TB, client int, nd *Node, op ledgerOp, token string) ledgerOut {
	op.On = nd.NodeName
	var args []string
	switch op.Kind {
	case "admit":
		args = []string{"admit", op.Name, "-o", "json"}
	case "join":
		args = []string{"join", token}
	case "revoke":
		args = []string{"tokens", "revoke", op.ID}
	case "list":
		args = []string{"tokens", "-o", "json"}
	}
	call := time.Since(h.start)
	stdout, stderr, exit := nd.Ctl(t.Context(), args...)
	ret := time.Since(h.start)
	out := ledgerOut{Code: codeOf(exit, stderr)}
	if out.ok() {
		switch op.Kind {
		case "admit":
			var r apitype.AdmitResponse
			if err := jsonDecode(stdout, &r); err != nil {
				t.Errorf("admit %s on %s: %v", op.Name, nd.NodeName, err)
			}
			out.ID = r.ID
			token = r.Token
		case "list":
			var toks []apitype.Token
			if err := jsonDecode(stdout, &toks); err != nil {
				t.Errorf("tokens on %s: %v", nd.NodeName, err)
			}
			out.Tokens = map[string]string{}
			for _, tk := range toks {
				out.Tokens[tk.ID] = tk.State
			}
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if out.ID != "" {
		h.known[out.ID] = true
		h.tokens[out.ID] = token
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: op, Output: out,
		Call: int64(call), Return: int64(ret)})
	t.Logf("%8s–%8s client %d: %s", call.Round(time.Millisecond), ret.Round(time.Millisecond), client,
		ledgerModel.DescribeOperation(op, out))
	return out
}

// check runs porcupine on the history (a list of every known token on
// each listing).
func (h *history) check(t testing.TB) {
	t.Helper()
	h.mu.Lock()
	ops := slices.Clone(h.ops)
	h.mu.Unlock()
	for i := range ops { // a listing reports the tokens this history minted; others are not the model's
		out := ops[i].Output.(ledgerOut)
		if out.Tokens != nil {
			only := map[string]string{}
			for id, st := range out.Tokens {
				if h.known[id] {
					only[id] = st
				}
			}
			out.Tokens = only
			ops[i].Output = out
		}
	}
	res, info := porcupine.CheckOperationsVerbose(ledgerModel, ops, time.Minute)
	if res != porcupine.Ok {
		var b strings.Builder
		for _, part := range info.PartialLinearizationsOperations() {
			for _, lin := range part {
				for _, op := range lin {
					b.WriteString("  " + ledgerModel.DescribeOperation(op.Input, op.Output) + "\n")
				}
				b.WriteString("  --\n")
			}
		}
		t.Fatalf("the token ledger's history (%d operations) is %s; longest partial linearizations:\n%s", len(ops), res, b.String())
	}
	t.Logf("the token ledger's history (%d operations) is linearizable", len(ops))
}

// TestLedgerModel: the model accepts what the ledger promises and refuses
// a token used twice, a revoked token admitting a node, an admit refused
// that minted anyway, and a listing that lost a token.
func TestLedgerModel(t *testing.T) {
	op := func(call, ret int64, in ledgerOp, out ledgerOut) porcupine.Operation {
		return porcupine.Operation{Input: in, Output: out, Call: call, Return: ret}
	}
	admit := func(call, ret int64, id string) porcupine.Operation {
		return op(call, ret, ledgerOp{Kind: "admit", Name: "n" + id}, ledgerOut{ID: id})
	}
	join := func(call, ret int64, id string, c codes.Code) porcupine.Operation {
		return op(call, ret, ledgerOp{Kind: "join", ID: id}, ledgerOut{Code: c})
	}
	revoke := func(call, ret int64, id string, c codes.Code) porcupine.Operation {
		return op(call, ret, ledgerOp{Kind: "revoke", ID: id}, ledgerOut{Code: c})
	}
	list := func(call, ret int64, m map[string]string) porcupine.Operation {
		return op(call, ret, ledgerOp{Kind: "list"}, ledgerOut{Tokens: m})
	}
	for _, tc := range []struct {
		name string
		ok   bool
		ops  []porcupine.Operation
	}{
		{"admit, join, second join consumed", true, []porcupine.Operation{
			admit(0, 1, "a"), join(2, 3, "a", ""), join(4, 5, "a", codes.TokenConsumed),
			list(6, 7, map[string]string{"a": "used"})}},
		{"concurrent joins, one wins", true, []porcupine.Operation{
			admit(0, 1, "a"), join(2, 5, "a", codes.TokenConsumed), join(2, 5, "a", "")}},
		{"a join lost in a leader change used the token after all", true, []porcupine.Operation{
			admit(0, 1, "a"), join(2, 3, "a", codes.NoLeader), join(4, 5, "a", codes.TokenConsumed)}},
		{"or did not", true, []porcupine.Operation{
			admit(0, 1, "a"), join(2, 3, "a", codes.CAHolderDown), join(4, 5, "a", "")}},
		{"minority refusals change nothing", true, []porcupine.Operation{
			admit(0, 1, "a"), op(2, 3, ledgerOp{Kind: "admit", Name: "m"}, ledgerOut{Code: codes.NoLeader}),
			revoke(2, 3, "a", codes.NoLeader), list(4, 5, map[string]string{"a": "unused"})}},
		{"revoke then join refused", true, []porcupine.Operation{
			admit(0, 1, "a"), revoke(2, 3, "a", ""), join(4, 5, "a", codes.TokenRevoked), revoke(6, 7, "a", "")}},
		{"a token used twice", false, []porcupine.Operation{
			admit(0, 1, "a"), join(2, 3, "a", ""), join(4, 5, "a", "")}},
		{"concurrent joins both win", false, []porcupine.Operation{
			admit(0, 1, "a"), join(2, 5, "a", ""), join(2, 5, "a", "")}},
		{"a revoked token admits", false, []porcupine.Operation{
			admit(0, 1, "a"), revoke(2, 3, "a", ""), join(4, 5, "a", "")}},
		{"revoked after use", false, []porcupine.Operation{
			admit(0, 1, "a"), join(2, 3, "a", ""), revoke(4, 5, "a", "")}},
		{"consumed before any use", false, []porcupine.Operation{
			admit(0, 1, "a"), join(2, 3, "a", codes.TokenConsumed)}},
		{"an id minted twice", false, []porcupine.Operation{admit(0, 1, "a"), admit(2, 3, "a")}},
		{"a listing lost a use", false, []porcupine.Operation{
			admit(0, 1, "a"), join(2, 3, "a", ""), list(4, 5, map[string]string{"a": "unused"})}},
		{"a stale listing", false, []porcupine.Operation{
			admit(0, 1, "a"), list(2, 3, map[string]string{})}},
	} {
		if got := porcupine.CheckOperations(ledgerModel, tc.ops); got != tc.ok {
			t.Errorf("%s: linearizable %v, want %v", tc.name, got, tc.ok)
		}
	}
}

// joinUntil runs `meshctl join` on w until it succeeds or fails with a code
// that says the token will never admit it (at most tries times), recording
// every attempt; it returns the last result.
func (h *history) joinUntil(t testing.TB, client int, w *Node, id, token string, tries int) ledgerOut {
	var out ledgerOut
	for range tries {
		out = h.do(t, client, w, ledgerOp{Kind: "join", Name: w.NodeName, ID: id}, token)
		if out.ok() || out.Code == codes.TokenConsumed || out.Code == codes.TokenRevoked {
			return out
		}
	}
	return out
}

// admitUntil admits name on nd until it succeeds (at most tries times, each
// recorded).
func (h *history) admitUntil(t testing.TB, client int, nd *Node, name string, tries int) (ledgerOut, string) {
	var out ledgerOut
	for range tries {
		var tok string
		out, tok = h.admit(t, client, nd, name)
		if out.ok() {
			return out, tok
		}
	}
	return out, ""
}

// admit is do for an admission that also returns the token.
func (h *history) admit(t testing.TB, client int, nd *Node, name string) (ledgerOut, string) {
	out := h.do(t, client, nd, ledgerOp{Kind: "admit", Name: name}, "")
	return out, h.tokenOf(out.ID)
}

func (h *history) tokenOf(id string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.tokens[id]
}

// TestPartitionLedger (issue 12 item 8): admissions, joins and revocations
// on both sides of a partition and while the leader is killed. The cut
// control node refuses admissions and revocations with NoLeader; the
// majority admits, joins, revokes; a used token joined again is
// TokenConsumed, a revoked one TokenRevoked. After healing and the killed
// leader's return, every control node lists each name and overlay IP once,
// each used token consumed by one node, and porcupine finds the recorded
// history (every call with its call and return time and result)
// linearizable against the token ledger's model.
func TestPartitionLedger(t *testing.T) {
	n := NewNet(t)
	controls := controlCluster(t, n)
	origin, c2, c3 := controls[0], controls[1], controls[2]
	workers := map[string]*Node{}
	for _, name := range []string{"a1", "p1", "p2", "k1", "k2", "k3", "k4"} {
		workers[name] = n.NewNode(name)
		workers[name].Start(t)
	}
	// A second machine that claims p1's name, to try p1's token again.
	p1b := n.NewNodeOn(n.AddHost("p1b"), "p1")
	p1b.Start(t)

	h := newHistory()
	a1, tokA1 := h.admit(t, 0, c2, "a1")
	if !a1.ok() {
		t.Fatalf("admit a1: %s", a1.Code)
	}
	h.do(t, 0, origin, ledgerOp{Kind: "list"}, "")

	// Partition: c3 alone, the CA holder and c2 the majority. Work on
	// both sides at once.
	c3.Cut()
	var wg sync.WaitGroup
	wg.Go(func() { // the minority
		if out, _ := h.admit(t, 1, c3, "m1"); out.Code != codes.NoLeader {
			t.Errorf("admit on the cut node: %q, want %s", out.Code, codes.NoLeader)
		}
		if out := h.do(t, 1, c3, ledgerOp{Kind: "revoke", ID: a1.ID}, ""); out.Code != codes.NoLeader {
			t.Errorf("revoke on the cut node: %q, want %s", out.Code, codes.NoLeader)
		}
		if out, _ := h.admit(t, 1, c3, "m2"); out.Code != codes.NoLeader {
			t.Errorf("admit on the cut node: %q, want %s", out.Code, codes.NoLeader)
		}
	})
	wg.Go(func() { // the majority: admit p1 and join it; then p1's token again from another machine
		out, tok := h.admitUntil(t, 2, c2, "p1", 3)
		if !out.ok() {
			t.Errorf("admit p1 on the majority: %s", out.Code)
			return
		}
		if j := h.joinUntil(t, 2, workers["p1"], out.ID, tok, 3); !j.ok() {
			t.Errorf("join p1: %s", j.Code)
		}
		if j := h.do(t, 2, p1b, ledgerOp{Kind: "join", Name: "p1", ID: out.ID}, tok); j.Code != codes.TokenConsumed {
			t.Errorf("p1's token on a second machine: %q, want %s", j.Code, codes.TokenConsumed)
		}
	})
	wg.Go(func() { // the majority: admit p2, revoke it, its join refused
		out, tok := h.admitUntil(t, 3, origin, "p2", 3)
		if !out.ok() {
			t.Errorf("admit p2 on the majority: %s", out.Code)
			return
		}
		if r := h.do(t, 3, origin, ledgerOp{Kind: "revoke", ID: out.ID}, ""); !r.ok() {
			t.Errorf("revoke p2 on the majority: %s", r.Code)
		}
		if j := h.do(t, 3, workers["p2"], ledgerOp{Kind: "join", Name: "p2", ID: out.ID}, tok); j.Code != codes.TokenRevoked {
			t.Errorf("join with a revoked token: %q, want %s", j.Code, codes.TokenRevoked)
		}
	})
	wg.Go(func() { // the token minted before the cut, used during it
		if j := h.joinUntil(t, 4, workers["a1"], a1.ID, tokA1, 3); !j.ok() {
			t.Errorf("join a1: %s", j.Code)
		}
	})
	wg.Wait()
	h.do(t, 0, c2, ledgerOp{Kind: "list"}, "")
	c3.Heal()
	Eventually(t, 15*time.Second, "c3 catches up", func() error {
		if !listed(t, c3, "p1") {
			return fmt.Errorf("c3 does not list p1 yet")
		}
		return nil
	})

	// Kill the leader while admissions and joins run on the others: first
	// a leader that is not the CA holder (the origin hands leadership off
	// when stopped gracefully), then the CA holder.
	origin.Stop(t)
	origin.Start(t)
	leader := ""
	Eventually(t, 15*time.Second, "a leader other than the CA holder", func() error {
		if leader = leaderOf(t, c2); leader == "" || leader == "origin" {
			return fmt.Errorf("leader %q", leader)
		}
		return nil
	})
	h.killDuringWork(t, controls, byName(controls, leader), workers, 5, "k1", "k2")
	h.killDuringWork(t, controls, origin, workers, 7, "k3", "k4")
	for _, c := range controls {
		Eventually(t, 15*time.Second, c.NodeName+" lists k1 to k4 active", func() error {
			for _, name := range []string{"k1", "k2", "k3", "k4"} {
				if r, ok := nodeRow(t, c, name); !ok || r.State != "active" {
					return fmt.Errorf("%s is %q", name, r.State)
				}
			}
			return nil
		})
		h.do(t, 0, c, ledgerOp{Kind: "list"}, "")
		uniqueNamesAndIPs(t, c)
	}
	if t.Failed() {
		return
	}
	h.check(t)
}

// killDuringWork admits and joins one worker per name through the control
// nodes other than victim, SIGKILLs victim as they start, then restarts it
// and runs each join that did not end in a success again until it does.
func (h *history) killDuringWork(t *testing.T, controls []*Node, victim *Node, workers map[string]*Node, client int, names ...string) {
	t.Helper()
	var others []*Node
	for _, c := range controls {
		if c != victim {
			others = append(others, c)
		}
	}
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() {
			out, tok := h.admitUntil(t, client+i, others[i%len(others)], name, 20)
			if !out.ok() {
				t.Errorf("admit %s while %s is killed: %s", name, victim.NodeName, out.Code)
				return
			}
			h.joinUntil(t, client+i, workers[name], out.ID, tok, 5) // CAHolderDown while the CA holder is the victim
		})
	}
	victim.Kill()
	wg.Wait()
	victim.Start(t)
	for i, name := range names { // with every node back, each join ends
		if listed(t, others[0], name) && tokenState(t, others[0], name) == apitype.TokenUsed {
			if r, _ := nodeRow(t, others[0], name); r.State == "active" {
				continue
			}
		}
		id, tok := h.lastAdmit(name)
		if id == "" {
			continue
		}
		if j := h.joinUntil(t, client+i, workers[name], id, tok, 5); !j.ok() {
			t.Errorf("join %s after %s's return: %s", name, victim.NodeName, j.Code)
		}
	}
}

// lastAdmit is the id and token of the last successful admission of name.
func (h *history) lastAdmit(name string) (id, token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, op := range slices.Backward(h.ops) {
		in, out := op.Input.(ledgerOp), op.Output.(ledgerOut)
		if in.Kind == "admit" && in.Name == name && out.ok() {
			return out.ID, h.tokens[out.ID]
		}
	}
	return "", ""
}

// uniqueNamesAndIPs fails unless nd lists every name and overlay IP once
// and every used token as consumed by a different node.
func uniqueNamesAndIPs(t testing.TB, nd *Node) {
	t.Helper()
	names, ips := map[string]bool{}, map[string]string{}
	for _, x := range nd.Nodes(t) {
		if names[x.Name] {
			t.Errorf("%s lists the name %s twice", nd.NodeName, x.Name)
		}
		names[x.Name] = true
		if o, dup := ips[x.OverlayIP]; dup {
			t.Errorf("%s lists overlay IP %s for %s and %s", nd.NodeName, x.OverlayIP, o, x.Name)
		}
		ips[x.OverlayIP] = x.Name
	}
	var toks []apitype.Token
	if err := nd.CtlJSON(t.Context(), &toks, "tokens"); err != nil {
		t.Fatal(err)
	}
	by := map[string]string{}
	for _, tk := range toks {
		if tk.State != apitype.TokenUsed {
			continue
		}
		if o, dup := by[tk.ConsumedBy]; dup {
			t.Errorf("%s lists %s as consuming tokens %s and %s", nd.NodeName, tk.ConsumedBy, o, tk.ID)
		}
		by[tk.ConsumedBy] = tk.ID
	}
}

// split partitions the network in two: every host of a reaches no host of
// b and the other way round (an unreachable route per address in each
// namespace; the bridge stays up, so each side still talks within itself).
// It returns the heal.
func split(t testing.TB, a, b []*Node) (heal func()) {
	t.Helper()
	var undo [][]string
	for _, pair := range [][2][]*Node{{a, b}, {b, a}} {
		for _, from := range pair[0] {
			for _, to := range pair[1] {
				from.Net.in(from.Name, "ip", "route", "add", "unreachable", to.IP+"/32")
				undo = append(undo, []string{from.Name, to.IP})
			}
		}
	}
	return func() {
		for _, u := range undo {
			a[0].Net.in(u[0], "ip", "route", "del", "unreachable", u[1]+"/32")
		}
	}
}

// TestPartitionLedgerSplit: five control nodes split 2 | 3, each side with
// a worker. On the minority side (two control nodes that still see each
// other, and a joiner) admissions and revocations are refused with
// NoLeader and a join with a token minted before the split is refused
// (NoLeader or CAHolderDown: the CA holder is on the other side) with its
// token unused; the majority admits and joins meanwhile. Healed, the
// minority's joiner joins with the same token; names, IPs and consumers
// are unique and the history is linearizable.
func TestPartitionLedgerSplit(t *testing.T) {
	n := NewNet(t)
	controls := controlCluster(t, n)
	origin := controls[0]
	for _, name := range []string{"c4", "c5"} {
		c := n.NewNode(name)
		c.Start(t)
		c.MustCtl(t, "join", origin.Admit(t, name, "--role", "control"))
		controls = append(controls, c)
	}
	Eventually(t, 20*time.Second, "five voters", func() error {
		for _, c := range controls {
			if r := listedRaft(t, origin, c.NodeName); r != "voter" && r != "leader" {
				return fmt.Errorf("%s is raft %q", c.NodeName, r)
			}
		}
		return nil
	})
	mw, nw := n.NewNode("mw"), n.NewNode("nw")
	mw.Start(t)
	nw.Start(t)

	h := newHistory()
	pre, preTok := h.admit(t, 0, controls[1], "nw")
	if !pre.ok() {
		t.Fatalf("admit nw: %s", pre.Code)
	}
	// The raft leader goes to the minority side (a deposed leader must not
	// admit): the origin hands leadership off when stopped gracefully, so
	// the leader is not the CA holder, which stays with the majority.
	origin.Stop(t)
	origin.Start(t)
	leader := ""
	Eventually(t, 15*time.Second, "a leader other than the CA holder", func() error {
		if leader = leaderOf(t, controls[1]); leader == "" || leader == "origin" {
			return fmt.Errorf("leader %q", leader)
		}
		return nil
	})
	minority := []*Node{byName(controls, leader)} // the deposed leader first
	var majority []*Node
	for _, c := range controls {
		switch {
		case c == minority[0]:
		case len(minority) < 2 && c != origin:
			minority = append(minority, c)
		default:
			majority = append(majority, c)
		}
	}
	t.Logf("minority: %s (the leader), %s", minority[0].NodeName, minority[1].NodeName)
	majority, minority = append(majority, mw), append(minority, nw)
	heal := split(t, majority, minority)
	var wg sync.WaitGroup
	wg.Go(func() {
		if out, _ := h.admit(t, 1, minority[0], "m1"); out.Code != codes.NoLeader {
			t.Errorf("admit on the minority: %q, want %s", out.Code, codes.NoLeader)
		}
		if out := h.do(t, 1, minority[1], ledgerOp{Kind: "revoke", ID: pre.ID}, ""); out.Code != codes.NoLeader {
			t.Errorf("revoke on the minority: %q, want %s", out.Code, codes.NoLeader)
		}
	})
	wg.Go(func() {
		j := h.do(t, 2, nw, ledgerOp{Kind: "join", Name: "nw", ID: pre.ID}, preTok)
		if j.Code != codes.NoLeader && j.Code != codes.CAHolderDown {
			t.Errorf("join on the minority: %q, want %s or %s", j.Code, codes.NoLeader, codes.CAHolderDown)
		}
	})
	wg.Go(func() {
		// One attempt each: the majority elects a new leader within a
		// second, and a write forwarded to the deposed one must not wait
		// out its 10 s bound (it did, and then answered NoLeader).
		out, tok := h.admit(t, 3, majority[1], "mw")
		if !out.ok() {
			t.Errorf("admit on the majority: %s", out.Code)
			return
		}
		if j := h.do(t, 3, mw, ledgerOp{Kind: "join", Name: "mw", ID: out.ID}, tok); !j.ok() {
			t.Errorf("join on the majority: %s", j.Code)
		}
	})
	wg.Wait()
	h.do(t, 0, origin, ledgerOp{Kind: "list"}, "")
	if s := tokenState(t, origin, "nw"); s != apitype.TokenUnused {
		t.Errorf("the minority's refused join left its token %s", s)
	}
	heal()
	if j := h.joinUntil(t, 2, nw, pre.ID, preTok, 5); !j.ok() {
		t.Errorf("join nw after healing: %s", j.Code)
	}
	for _, c := range controls {
		Eventually(t, 15*time.Second, c.NodeName+" lists mw and nw active", func() error {
			for _, name := range []string{"mw", "nw"} {
				if r, ok := nodeRow(t, c, name); !ok || r.State != "active" {
					return fmt.Errorf("%s is %q", name, r.State)
				}
			}
			return nil
		})
		h.do(t, 0, c, ledgerOp{Kind: "list"}, "")
		uniqueNamesAndIPs(t, c)
	}
	if t.Failed() {
		return
	}
	h.check(t)
}
