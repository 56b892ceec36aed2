//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/agent/localclient"
	"github.com/meshd/meshd/codes"
)

// Issue 15 item 3: the web console (`meshctl ui`) in a real browser,
// headless Debian chromium driven over the DevTools protocol (chromedp),
// against a cluster of real meshd processes. meshctl ui talks to meshd over
// its unix socket, a file, so it and the browser run in the test's own
// namespace on 127.0.0.1; only meshd runs in the network namespaces.

// chromiumPath is Debian's chromium; as root (the only way this suite runs)
// a missing browser fails the test: scripts/install-deps.sh installs it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium not found: run scripts/install-deps.sh (it installs Debian's chromium for the console's browser tests)")
	return ""
}

// startUI runs `meshctl ui` against nd's socket and returns the URL it
// prints (with its one-time secret) and stop, which interrupts meshctl
// (SIGINT, as Ctrl-C) and fails the test unless it exits 0 within 10 s;
// stop runs when the test ends if not before.
func startUI(t *testing.T, nd *Node) (string, func()) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "meshctl"), "--socket", nd.Socket, "ui", "--addr", "127.0.0.1:0")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "http://") && strings.Contains(line, "?token=") {
				urls <- line
			}
		}
		_, _ = io.Copy(io.Discard, out)
		done <- cmd.Wait()
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGINT)
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("meshctl ui after SIGINT: %v\n%s", err, stderr.String())
				}
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				t.Errorf("meshctl ui still running 10s after SIGINT")
			}
		})
	}
	t.Cleanup(stop)
	select {
	case u := <-urls:
		if s := stderr.String(); s != "" {
			t.Fatalf("meshctl ui warned on start:\n%s", s)
		}
		return u, stop
	case err := <-done:
		t.Fatalf("meshctl ui ended before printing a URL: %v\n%s", err, stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatal("meshctl ui printed no URL within 20s")
	}
	return "", nil
}

// browser starts a headless chromium with a fresh profile of its own and
// returns the context of its first tab; it is closed when the test ends.
func browser(t *testing.T, exe string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.NoSandbox, // as root chromium refuses to start with its sandbox
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1100, 900),
		chromedp.Flag("lang", "en-US"),
	)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() { cancel(); cancelA() })
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// tab opens another tab of the same browser (same cookies).
func tab(t *testing.T, b context.Context) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatal(err)
	}
	return ctx
}

// do runs browser actions with a deadline and fails the test on an error.
func do(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// get runs one browser action that returns a value, with a deadline.
func get[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	return get(t, ctx, "evaluate "+js, chromedp.Evaluate[T](js))
}

// evalErr is eval for use inside Eventually.
func evalErr[T any](ctx context.Context, js string) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](js))
}

// problemCode is the code of the page's failure (#problem-code), "" when none.
func problemCode(t *testing.T, ctx context.Context) string {
	t.Helper()
	return eval[string](t, ctx, `(document.getElementById("problem-code") || {textContent: ""}).textContent.trim()`)
}

// artifacts is where the screenshots go: $MESHD_ARTIFACTS/console when set
// (kept), else a temporary directory kept only when the test fails.
func artifacts(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("MESHD_ARTIFACTS"); d != "" {
		dir := filepath.Join(d, "console")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshots in %s", dir)
		return dir
	}
	dir, err := os.MkdirTemp("", "meshd-console-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("screenshots kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	t.Logf("screenshots in %s (removed when the test passes; set MESHD_ARTIFACTS to keep them)", dir)
	return dir
}

// shot saves a full-page PNG of the tab as DIR/NAME.png.
func shot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png := get(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// nodeLinks are the names of the nodes in the Mesh page's picture, by
// condition class: "ok w1" etc.
func nodeLinks(ctx context.Context) (map[string]string, error) {
	return evalErr[map[string]string](ctx, `Object.fromEntries([...document.querySelectorAll("#live a.node")].map(a =>
		[a.getAttribute("href").replace("/node/", ""), [...a.classList].find(c => c.startsWith("cond-")) || ""]))`)
}

// TestConsoleBrowser: the console in chromium against origin (control) and
// w1, w2 (workers). The URL is first opened by clicking a link on a page of
// another site (the secret exchange must still leave a working session).
// The Mesh page shows every node, one edge per tunnel origin reports and
// the lighthouses, and a refresh that finds nothing new keeps the keyboard
// focus; a node admitted from the Admit page joins with the token shown
// there and appears on an open Mesh page without a reload; a killed node
// turns failed; Tokens revokes; Approvals approves and rejects waiting
// joins; the Node page removes; the Audit page finds what was done; a
// browser without the secret and a form without the CSRF token are refused
// with their codes; when meshctl ui stops the open page says so. Every page
// is saved as a screenshot and gets the accessibility pass.
func TestConsoleBrowser(t *testing.T) {
	exe := chromiumPath(t)
	n := NewNet(t)
	nodes := cluster(t, n, "w1", "w2")
	origin := nodes[0]
	url, stopUI := startUI(t, origin)
	base, _, _ := strings.Cut(url, "?")
	base = strings.TrimSuffix(base, "/")
	dir := artifacts(t)

	// Tunnels from origin to both workers and from w1 to w2, so there are
	// edges to draw, one of them between two workers (which only the
	// cluster-wide tunnel view shows).
	ips := overlayIPs(t, origin)
	for _, w := range []string{"w1", "w2"} {
		Eventually(t, 10*time.Second, "origin reaches "+w+" over the overlay", func() error {
			return origin.Ping(t.Context(), ips[w])
		})
	}
	Eventually(t, 10*time.Second, "w1 reaches w2 over the overlay", func() error {
		return nodes[1].Ping(t.Context(), ips["w2"])
	})
	view := localclient.Client{Socket: origin.Socket}

	// A settled cluster before the page opens: what it shows first is what
	// later refreshes find, so they must leave the page (and focus) alone.
	Eventually(t, 20*time.Second, "origin reports w1 and w2 active and alive, and tunnels to both", func() error {
		var st apitype.Status
		if err := origin.CtlJSON(t.Context(), &st, "status"); err != nil {
			return err
		}
		var tunnels []string
		for _, tu := range st.Overlay.Tunnels {
			tunnels = append(tunnels, tu.Name)
		}
		slices.Sort(tunnels)
		if !slices.Equal(tunnels, []string{"w1", "w2"}) {
			return fmt.Errorf("tunnels to %q", tunnels)
		}
		for _, x := range origin.Nodes(t) {
			if x.State != "active" || x.Gossip != "alive" {
				return fmt.Errorf("%s is %s, gossip %s", x.Name, x.State, x.Gossip)
			}
		}
		// The workers' reports reached the view: each tunnel seen from
		// both ends.
		m, err := view.Tunnels(t.Context())
		if err != nil {
			return err
		}
		if got := viewEdges(m, 2); !slices.Equal(got, []string{"origin ↔ w1", "origin ↔ w2", "w1 ↔ w2"}) {
			return fmt.Errorf("the tunnel view's edges seen from both ends: %q (view %+v)", got, m)
		}
		return nil
	})

	// Another site's page links to the console's URL; the operator clicks it.
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!DOCTYPE html><title>chat</title><p><a id="go" href="%s">the console</a></p>`, url)
	}))
	defer other.Close()
	otherSite := strings.Replace(other.URL, "127.0.0.1", "localhost", 1) // another site than 127.0.0.1
	b := browser(t, exe)
	mesh := b
	do(t, mesh, "open the link on "+otherSite,
		chromedp.Navigate(otherSite),
		chromedp.Click(chromedp.CSS("#go")),
		chromedp.WaitVisible(chromedp.CSS("#live a.node, #problem-code")))
	loc := get(t, mesh, "location", chromedp.Location())
	if loc != base+"/" || problemCode(t, mesh) != "" {
		t.Fatalf("after the link from another site: at %s with failure %q, want %s/ and no failure", loc, problemCode(t, mesh), base)
	}

	// Keyboard focus on a node link stays put while the live refresh finds
	// nothing new (the cluster is settled: origin has its tunnels).
	if !eval[bool](t, mesh, `(() => { const a = document.querySelector('#live table a[href="/node/w1"]'); a.focus(); return document.activeElement === a; })()`) {
		t.Fatal("cannot focus w1's link in the node table")
	}
	Eventually(t, 10*time.Second, "a live refresh of the Mesh page", func() error {
		s, err := evalErr[string](mesh, `document.getElementById("live-status").textContent`)
		if err == nil && !strings.HasPrefix(s, "checked ") {
			err = fmt.Errorf("#live-status says %q", s)
		}
		return err
	})
	if f := eval[string](t, mesh, `document.activeElement.getAttribute("href") || document.activeElement.tagName`); f != "/node/w1" {
		t.Fatalf("after a live refresh that changed nothing keyboard focus is on %q, want w1's link", f)
	}
	eval[bool](t, mesh, `document.activeElement.blur(), true`)

	// Every node, and one edge per tunnel of the cluster (GET /v0/tunnels:
	// the workers' tunnels too), none of them one-sided.
	Eventually(t, 20*time.Second, "the Mesh page shows 3 nodes and the tunnels origin-w1, origin-w2, w1-w2", func() error {
		got, err := nodeLinks(mesh)
		if err != nil {
			return err
		}
		if len(got) != 3 || got["origin"] != "cond-ok" || got["w1"] != "cond-ok" || got["w2"] != "cond-ok" {
			return fmt.Errorf("nodes %v", got)
		}
		m, err := view.Tunnels(t.Context())
		if err != nil {
			return err
		}
		want := viewEdges(m, 1)
		edges, err := pageEdges(mesh, "")
		if err != nil {
			return err
		}
		if !slices.Equal(edges, want) || !slices.Equal(want, []string{"origin ↔ w1", "origin ↔ w2", "w1 ↔ w2"}) {
			return fmt.Errorf("edges %q, the tunnel view's %q", edges, want)
		}
		if one, err := pageEdges(mesh, ".one-sided"); err != nil || len(one) != 0 {
			return fmt.Errorf("one-sided edges %q (%v)", one, err)
		}
		return nil
	})
	// The lighthouses are ringed: as a worker sees them (w1's status names
	// their overlay IPs) and as origin says of itself.
	var want []string
	for _, nd := range nodes[:2] {
		var st apitype.Status
		if err := nd.CtlJSON(t.Context(), &st, "status"); err != nil {
			t.Fatal(err)
		}
		if st.Overlay.Lighthouse && !slices.Contains(want, nd.NodeName) {
			want = append(want, nd.NodeName)
		}
		for name, ip := range ips {
			if slices.Contains(st.Overlay.Lighthouses, ip) && !slices.Contains(want, name) {
				want = append(want, name)
			}
		}
	}
	slices.Sort(want)
	if got := eval[[]string](t, mesh, `[...document.querySelectorAll("#live a.node.lighthouse")].map(a => a.getAttribute("href").replace("/node/", "")).sort()`); !slices.Equal(got, want) || len(want) == 0 {
		t.Errorf("lighthouses ringed on the Mesh page: %q, want %q (from origin's and w1's status)", got, want)
	}
	shot(t, mesh, dir, "mesh")
	accessible(t, mesh, dir, "mesh")
	checkNodeFilter(t, mesh, []string{"origin", "w1", "w2"}, ips)

	// A browser that never had the URL's secret is refused, and so is one
	// that tries the spent secret.
	stranger := browser(t, exe)
	for _, u := range []string{base + "/", base + "/admit", url} {
		do(t, stranger, "stranger opens "+u, chromedp.Navigate(u), chromedp.WaitVisible(chromedp.CSS("#problem-code")))
		if c := problemCode(t, stranger); c != codes.ConsoleSecret.String() {
			t.Fatalf("%s without the session: %q, want %s", u, c, codes.ConsoleSecret)
		}
	}
	if eval[bool](t, stranger, `document.body.textContent.includes("w1") || document.querySelectorAll("a.node").length > 0`) {
		t.Fatal("the refusal shows something of the cluster")
	}
	shot(t, stranger, dir, "refused-secret")

	// Admit w3 from the Admit page of a second tab, while the first keeps
	// the Mesh page open, and join with the token shown.
	eval[string](t, mesh, `window.e2eNoReload = "still this page"`)
	ops := tab(t, b)
	// The Node page of a worker (not the node the console talks to) lists
	// its tunnels from the cluster-wide view: to origin and to w2.
	do(t, ops, "w1's node page", chromedp.Navigate(base+"/node/w1"), chromedp.WaitVisible(chromedp.CSS("#node-tunnels")))
	if got := eval[[]string](t, ops, `[...document.querySelectorAll("#node-tunnels tbody tr")].map(r => r.cells[0].textContent + " " + r.cells[3].textContent)`); !slices.Equal(got, []string{"origin origin, w1", "w2 w1, w2"}) {
		t.Errorf("w1's node page lists the tunnels %q, want origin and w2, each reported by both ends", got)
	}
	shot(t, ops, dir, "node-w1")
	do(t, ops, "admit page", chromedp.Navigate(base+"/admit"), chromedp.WaitVisible(chromedp.CSS("#name")))
	shot(t, ops, dir, "admit")
	accessible(t, ops, dir, "admit")
	do(t, ops, "admit w3",
		chromedp.SendKeys(chromedp.CSS("#name"), "w3"),
		chromedp.Click(chromedp.CSS(`form[action="/admit"] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS("#token")))
	tok := strings.TrimSpace(get(t, ops, "the token", chromedp.TextContent(chromedp.CSS("#token"))))
	command := get(t, ops, "the join command", chromedp.TextContent(chromedp.CSS("#command")))
	if !strings.Contains(command, "meshctl join "+tok) {
		t.Fatalf("the admit answer's command %q does not carry its token", command)
	}
	shot(t, ops, dir, "admitted")
	accessible(t, ops, dir, "admitted")
	w3 := n.NewNode("w3")
	w3.Start(t)
	w3.MustCtl(t, "join", tok)
	Eventually(t, 15*time.Second, "w3 on the open Mesh page", func() error {
		got, err := nodeLinks(mesh)
		if err != nil {
			return err
		}
		if len(got) != 4 || got["w3"] == "" {
			return fmt.Errorf("nodes %v", got)
		}
		return nil
	})
	if eval[string](t, mesh, `window.e2eNoReload || "reloaded"`) != "still this page" {
		t.Fatal("the Mesh page was reloaded to show the new node; console.js should have updated it in place")
	}

	// A killed node turns failed on the open page.
	nodes[2].Kill()
	Eventually(t, 20*time.Second, "w2 failed on the open Mesh page", func() error {
		got, err := nodeLinks(mesh)
		if err != nil {
			return err
		}
		if got["w2"] != "cond-down" {
			return fmt.Errorf("nodes %v", got)
		}
		return nil
	})
	// Its edges go (gossip failed: its report and the tunnels others still
	// hold to it are dropped), and the caption says why it has none.
	Eventually(t, 10*time.Second, "w2's edges gone from the open Mesh page", func() error {
		edges, err := pageEdges(mesh, "")
		if err != nil {
			return err
		}
		for _, e := range edges {
			if strings.Contains(e, "w2") {
				return fmt.Errorf("edges %q", e)
			}
		}
		if !slices.Contains(edges, "origin ↔ w1") {
			return fmt.Errorf("edges %q, want origin ↔ w1 still", edges)
		}
		caption, err := evalErr[string](mesh, `document.querySelector("#live figcaption").textContent`)
		if err == nil && !strings.Contains(caption, "w2: gossip: failed") {
			err = fmt.Errorf("caption %q", caption)
		}
		return err
	})
	shot(t, mesh, dir, "mesh-failed")

	// Revoke an unused token on the Tokens page.
	var spare apitype.AdmitResponse
	if err := origin.CtlJSON(t.Context(), &spare, "admit", "spare"); err != nil {
		t.Fatal(err)
	}
	do(t, ops, "tokens page", chromedp.Navigate(base+"/tokens"), chromedp.WaitVisible(chromedp.CSS("table")))
	// Minted by origin, by name: the record has its node id, kept in the
	// title (issue 28 item 6).
	var originStatus apitype.Status
	if err := origin.CtlJSON(t.Context(), &originStatus, "status"); err != nil {
		t.Fatal(err)
	}
	if got := eval[[]string](t, ops, `[...new Set([...document.querySelectorAll("tbody tr")].map(r => r.cells[5].textContent + " " + (r.cells[5].querySelector("[title]") || {title: ""}).title))]`); !slices.Equal(got, []string{"origin node id " + originStatus.NodeID}) {
		t.Errorf("the tokens' minted by: %q, want origin, with its id %s in the title", got, originStatus.NodeID)
	}
	shot(t, ops, dir, "tokens")
	accessible(t, ops, dir, "tokens")
	do(t, ops, "revoke spare",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`button[aria-label^="revoke token %s "]`, spare.ID))),
		chromedp.WaitVisible(chromedp.CSS(".notice")))
	if c := problemCode(t, ops); c != "" {
		t.Fatalf("revoke: %s", c)
	}
	if s := tokenState(t, origin, "spare"); s != "revoked" {
		t.Fatalf("spare's token is %s after Revoke, want revoked", s)
	}

	// A form sent without the CSRF token is refused and changes nothing.
	do(t, ops, "admit page", chromedp.Navigate(base+"/admit"), chromedp.WaitVisible(chromedp.CSS("#name")))
	eval[bool](t, ops, `document.querySelector('form[action="/admit"] input[name=csrf]').remove(), true`)
	do(t, ops, "admit w4 without CSRF",
		chromedp.SendKeys(chromedp.CSS("#name"), "w4"),
		chromedp.Click(chromedp.CSS(`form[action="/admit"] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS("#problem-code")))
	if c := problemCode(t, ops); c != codes.ConsoleCSRF.String() {
		t.Fatalf("a POST without the CSRF token: %q, want %s", c, codes.ConsoleCSRF)
	}
	shot(t, ops, dir, "refused-csrf")
	if s := tokenState(t, origin, "w4"); s != "absent" {
		t.Fatalf("the refused admit minted a token for w4 (%s)", s)
	}

	// Admit w4 with approval from the Admit page; its join waits until the
	// code it shows is typed on the Approvals page.
	do(t, ops, "admit page", chromedp.Navigate(base+"/admit"), chromedp.WaitVisible(chromedp.CSS("#name")))
	do(t, ops, "admit w4 with approval",
		chromedp.SendKeys(chromedp.CSS("#name"), "w4"),
		chromedp.Click(chromedp.CSS("#approve")),
		chromedp.Click(chromedp.CSS(`form[action="/admit"] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS("#token")))
	tok = strings.TrimSpace(get(t, ops, "w4's token", chromedp.TextContent(chromedp.CSS("#token"))))
	w4 := n.NewNode("w4")
	w4.Start(t)
	join := startJoin(t, w4, tok, false)
	code := join.code(t)
	row := `form[action="/approvals/approve"]:has(input[name=name][value=w4])`
	Eventually(t, 15*time.Second, "w4 waiting on the Approvals page", func() error {
		ctx, cancel := context.WithTimeout(ops, 10*time.Second)
		defer cancel()
		if err := chromedp.Do(ctx, chromedp.Navigate(base+"/approvals"), chromedp.WaitVisible(chromedp.CSS("table"))); err != nil {
			return err
		}
		if n, err := evalErr[int](ops, `document.querySelectorAll('`+row+`').length`); err != nil || n != 1 {
			return fmt.Errorf("%d rows for w4 (%v)", n, err)
		}
		return nil
	})
	shot(t, ops, dir, "approvals")
	accessible(t, ops, dir, "approvals")
	do(t, ops, "approve w4",
		chromedp.SendKeys(chromedp.CSS(row+" input[name=code]"), code),
		chromedp.Click(chromedp.CSS(row+" button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS(".notice")))
	if c := problemCode(t, ops); c != "" {
		t.Fatalf("approve: %s", c)
	}
	if exit := join.wait(t, 60*time.Second); exit != 0 {
		t.Fatalf("w4's join after approval in the console: exit %d\n%s%s", exit, &join.stdout, &join.stderr)
	}
	if r, _ := nodeRow(t, origin, "w4"); r.State != "active" {
		t.Fatalf("w4 is %s after its approved join, want active", r.State)
	}

	// Reject on the Approvals page revokes the waiting join's token: the
	// join ends with TokenRevoked.
	tok = origin.Admit(t, "w5", "--approve")
	w5 := n.NewNode("w5")
	w5.Start(t)
	rejected := startJoin(t, w5, tok, false)
	rejected.code(t)
	Eventually(t, 15*time.Second, "w5 waiting on the Approvals page", func() error {
		ctx, cancel := context.WithTimeout(ops, 10*time.Second)
		defer cancel()
		if err := chromedp.Do(ctx, chromedp.Navigate(base+"/approvals"), chromedp.WaitVisible(chromedp.CSS("table"))); err != nil {
			return err
		}
		if n, err := evalErr[int](ops, `document.querySelectorAll('button[aria-label^="reject the join of w5 "]').length`); err != nil || n != 1 {
			return fmt.Errorf("%d Reject buttons for w5 (%v)", n, err)
		}
		return nil
	})
	do(t, ops, "reject w5",
		chromedp.Click(chromedp.CSS(`button[aria-label^="reject the join of w5 "]`)),
		chromedp.WaitVisible(chromedp.CSS(".notice")))
	if c := problemCode(t, ops); c != "" {
		t.Fatalf("reject: %s", c)
	}
	if exit := rejected.wait(t, 30*time.Second); exit != 1 || firstCode(rejected.stderr.String()) != codes.TokenRevoked {
		t.Fatalf("w5's join after Reject: exit %d, first code %s, want 1 and %s\n%s", exit, firstCode(rejected.stderr.String()), codes.TokenRevoked, &rejected.stderr)
	}
	if r, ok := nodeRow(t, origin, "w5"); ok && r.State == "active" {
		t.Fatalf("w5 is active after its join was rejected")
	}

	// Remove the dead w2 from its Node page, typing its name to confirm.
	do(t, ops, "node page of w2", chromedp.Navigate(base+"/node/w2"), chromedp.WaitVisible(chromedp.CSS("#confirm")))
	shot(t, ops, dir, "node")
	accessible(t, ops, dir, "node")
	do(t, ops, "remove w2",
		chromedp.SendKeys(chromedp.CSS("#confirm"), "w2"),
		chromedp.Click(chromedp.CSS(`form.danger button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(".notice")))
	if c := problemCode(t, ops); c != "" {
		t.Fatalf("remove: %s", c)
	}
	if r, _ := nodeRow(t, origin, "w2"); r.State != "removed" {
		t.Fatalf("w2 is %s after Remove, want removed", r.State)
	}
	Eventually(t, 10*time.Second, "w2 gone on the open Mesh page", func() error {
		got, err := nodeLinks(mesh)
		if err != nil {
			return err
		}
		if got["w2"] != "cond-gone" {
			return fmt.Errorf("nodes %v", got)
		}
		return nil
	})

	// The Audit page fits a 1280 px window, and names the nodes that
	// confirmed their joins, whose actor the record has as node:ID (issue
	// 28 item 6).
	checkAuditFits(t, ops, base, dir)
	if got := eval[[]string](t, ops, `[...document.querySelectorAll("tbody tr")].filter(r => r.cells[1].textContent === "confirm" && r.cells[2].textContent !== "node:" + r.cells[3].textContent || /\b[0-9a-f]{32}\b/.test(r.cells[2].textContent)).map(r => r.textContent)`); len(got) != 0 {
		t.Errorf("audit events whose actor is a node id, or a confirm not by its own node's name: %q", got)
	}
	if n := eval[int](t, ops, `[...document.querySelectorAll("tbody tr")].filter(r => r.cells[1].textContent === "confirm").length`); n < 3 {
		t.Errorf("%d confirm events on the audit page, want one for each of w1 to w4 at least", n)
	}

	// The Audit page, filtered with its form, has what was done here.
	do(t, ops, "audit page", chromedp.Navigate(base+"/audit"), chromedp.WaitVisible(chromedp.CSS("#q")))
	shot(t, ops, dir, "audit")
	accessible(t, ops, dir, "audit")
	do(t, ops, "filter the audit trail for w",
		chromedp.SendKeys(chromedp.CSS("#q"), "w"),
		chromedp.Click(chromedp.CSS(`form[action="/audit"] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`form[action="/audit"] a[href="/audit"]`))) // "show all": the filtered page
	if other := eval[int](t, ops, `[...document.querySelectorAll("tbody tr")].filter(r => !r.textContent.toLowerCase().includes("w")).length`); other != 0 {
		t.Errorf("the audit page filtered for w shows %d rows without a w", other)
	}
	events := eval[[]string](t, ops, `[...document.querySelectorAll("tbody tr")].map(r => r.cells[1].textContent + " " + r.cells[3].textContent)`)
	for _, want := range []string{"remove w2", "approve w4"} {
		if !slices.Contains(events, want) {
			t.Errorf("the audit page filtered for w lacks %q: %q", want, events)
		}
	}
	do(t, ops, "node page of origin", chromedp.Navigate(base+"/node/origin"), chromedp.WaitVisible(chromedp.CSS("dl.record")))
	shot(t, ops, dir, "node-self")
	accessible(t, ops, dir, "node-self")

	// meshctl ui stops (Ctrl-C): the open Mesh page says its live updates
	// paused, and keeps what it showed.
	shown := eval[int](t, mesh, `document.querySelectorAll("#live a.node").length`)
	stopUI()
	Eventually(t, 10*time.Second, "the open Mesh page notices meshctl ui stopped", func() error {
		s, err := evalErr[string](mesh, `document.getElementById("live-status").textContent`)
		if err == nil && s != "live updates paused: meshctl ui does not answer" {
			err = fmt.Errorf("#live-status says %q", s)
		}
		return err
	})
	if n := eval[int](t, mesh, `document.querySelectorAll("#live a.node").length`); n != shown || n < 5 {
		t.Fatalf("the Mesh page shows %d nodes after meshctl ui stopped, want the %d it showed (origin, w1 to w4 at least)", n, shown)
	}
}

// a11yScan runs in the page: the form controls without an accessible name,
// the text whose contrast with its background is under WCAG AA (4.5:1, 3:1
// for large text), and every element that takes keyboard focus, by a key
// (tag, id or name or href, text).
const a11yScan = `(() => {
	const visible = e => e.getClientRects().length > 0 && getComputedStyle(e).visibility !== "hidden";
	const key = e => [(e.closest("svg") ? "svg:" : "") + e.tagName.toLowerCase(), e.id || e.getAttribute("name") || e.getAttribute("href") || "", (e.getAttribute("aria-label") || e.textContent || "").replace(/\s+/g, " ").trim().slice(0, 40)].join(" ");
	const unlabeled = [...document.querySelectorAll("input:not([type=hidden]), select, textarea")]
		.filter(e => e.labels.length === 0 && !e.getAttribute("aria-label") && !e.getAttribute("aria-labelledby")).map(key);
	const rgb = s => { const m = s.match(/[\d.]+/g).map(Number); return {r: m[0], g: m[1], b: m[2], a: m.length > 3 ? m[3] : 1}; };
	const lum = c => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); }; return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); };
	const bg = e => { for (; e && e.nodeType === 1; e = e.parentElement) { const c = rgb(getComputedStyle(e).backgroundColor); if (c.a > 0) return c; } return {r: 255, g: 255, b: 255, a: 1}; };
	const lowContrast = [];
	for (const e of document.querySelectorAll("body *")) {
		if (!visible(e) || e.closest("svg") && e.tagName.toLowerCase() !== "text") continue;
		if (![...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())) continue;
		const s = getComputedStyle(e);
		if (e.closest(".visually-hidden")) continue;
		const fg = rgb(e.closest("svg") ? s.fill : s.color), b = bg(e);
		const l1 = lum(fg), l2 = lum(b), ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
		const size = parseFloat(s.fontSize), large = size >= 24 || size >= 18.66 && Number(s.fontWeight) >= 700;
		if (ratio < (large ? 3 : 4.5)) lowContrast.push(key(e) + " " + ratio.toFixed(2));
	}
	// Form controls' edges against their background: 3:1 (WCAG 1.4.11).
	const faintControls = [...document.querySelectorAll("input:not([type=hidden]), select, textarea, button")].filter(visible).flatMap(e => {
		const s = getComputedStyle(e);
		if (parseFloat(s.borderTopWidth) === 0) return [];
		const l1 = lum(rgb(s.borderTopColor)), l2 = lum(bg(e.parentElement)), ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
		return ratio < 3 ? [key(e) + " border " + s.borderTopColor + " " + ratio.toFixed(2)] : [];
	});
	// Every action, whatever its tabindex says, and what else asks for focus.
	const focusable = [...document.querySelectorAll("a[href], button, input:not([type=hidden]), select, textarea, [tabindex]:not([tabindex='-1'])")]
		.filter(e => visible(e) && !e.disabled).map(key);
	return {unlabeled, lowContrast, faintControls, focusable};
})()`

// accessible checks the page in ctx: every form control has a label, text
// has AA contrast as rendered, and Tab from the top of the page reaches
// every focusable element (the picture's node links too), each showing a
// focus outline.
func accessible(t *testing.T, ctx context.Context, dir, page string) {
	t.Helper()
	scan := eval[struct {
		Unlabeled   []string `json:"unlabeled"`
		LowContrast []string `json:"lowContrast"`
		Faint       []string `json:"faintControls"`
		Focusable   []string `json:"focusable"`
	}](t, ctx, a11yScan)
	if len(scan.Unlabeled) > 0 {
		t.Errorf("%s page: form controls without a label: %q", page, scan.Unlabeled)
	}
	if len(scan.LowContrast) > 0 {
		t.Errorf("%s page: text under AA contrast as rendered: %q", page, scan.LowContrast)
	}
	if len(scan.Faint) > 0 {
		t.Errorf("%s page: form controls whose edge is under 3:1 against the page: %q", page, scan.Faint)
	}
	eval[bool](t, ctx, `document.activeElement && document.activeElement.blur(), window.getSelection().removeAllRanges(), true`)
	reached := map[string]bool{}
	svgShot := false
	for range len(scan.Focusable) + 2 {
		do(t, ctx, page+": Tab", chromedp.KeyEvent(kb.Tab))
		f := eval[struct {
			Key     string `json:"key"`
			Visible bool   `json:"visible"`
		}](t, ctx, `(() => { const e = document.activeElement;
			if (!e || e === document.body) return {key: "", visible: true};
			const s = getComputedStyle(e);
			return {key: [(e.closest("svg") ? "svg:" : "") + e.tagName.toLowerCase(), e.id || e.getAttribute("name") || e.getAttribute("href") || "", (e.getAttribute("aria-label") || e.textContent || "").replace(/\s+/g, " ").trim().slice(0, 40)].join(" "),
				visible: e.matches(":focus-visible") && s.outlineStyle !== "none" && parseFloat(s.outlineWidth) >= 2}; })()`)
		if f.Key != "" && !f.Visible {
			t.Errorf("%s page: keyboard focus on %q shows no outline", page, f.Key)
		}
		if strings.HasPrefix(f.Key, "svg:") && !reached[f.Key] && !svgShot {
			shot(t, ctx, dir, page+"-focus-picture") // what the focus on a node of the picture looks like
			svgShot = true
		}
		reached[f.Key] = true
	}
	var missed []string
	for _, k := range scan.Focusable {
		if !reached[k] {
			missed = append(missed, k)
		}
	}
	if len(missed) > 0 {
		t.Errorf("%s page: Tab never reaches %q", page, missed)
	}
	t.Logf("%s page: labels, contrast as rendered, Tab through %d focusable elements", page, len(scan.Focusable))
}

// viewEdges is the view's edges seen from at least from ends, "a ↔ b".
func viewEdges(m apitype.TunnelMap, from int) []string {
	out := []string{}
	for _, e := range m.Edges {
		if len(e.SeenFrom) >= from {
			out = append(out, e.A+" ↔ "+e.B)
		}
	}
	slices.Sort(out)
	return out
}

// pageEdges is the Mesh page's edges (line.edge plus class), "a ↔ b",
// from their tooltips.
func pageEdges(page context.Context, class string) ([]string, error) {
	out, err := evalErr[[]string](page, `[...document.querySelectorAll("#live line.edge`+class+` title")].map(e => e.textContent.replace(/:.*/, "").replace(/ \(.*/, "")).sort()`)
	if out == nil && err == nil {
		out = []string{}
	}
	return out, err
}
