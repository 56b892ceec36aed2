//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// Issue 13 item 5: a token minted with `admit --approve` holds its join
// after the pinned handshake until an operator types the code the joiner
// shows into `meshctl approve NAME CODE` on a control node.

// waitingJoin is a `meshctl join` running in the background.
type waitingJoin struct {
	codes  chan string // each code the join shows
	done   chan struct{}
	exit   int
	stdout bytes.Buffer
	stderr bytes.Buffer
}

// textCode is the code in join's text output: "code 123 456".
var textCode = regexp.MustCompile(`waiting for approval: code (\d{3}) (\d{3})`)

// startJoin runs `meshctl join TOKEN` on w (with -o json when asJSON) and
// reports each approval code it prints as it prints it.
func startJoin(t *testing.T, w *Node, tok string, asJSON bool) *waitingJoin {
	t.Helper()
	args := []string{"--socket", w.Socket, "join", tok}
	if asJSON {
		args = append(args, "-o", "json")
	}
	cmd := w.Exec(t.Context(), filepath.Join(binDir, "meshctl"), args...)
	j := &waitingJoin{codes: make(chan string, 4), done: make(chan struct{})}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, &j.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			j.stdout.WriteString(line + "\n")
			if asJSON {
				var l apitype.JoinLine
				if err := json.Unmarshal([]byte(line), &l); err != nil {
					j.stdout.WriteString("!! not a JSON line\n")
					continue
				}
				if l.Approval != nil {
					j.codes <- l.Approval.Code
				}
			} else if m := textCode.FindStringSubmatch(line); m != nil {
				j.codes <- m[1] + m[2]
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		err := cmd.Wait()
		_ = pw.Close()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			j.exit = ee.ExitCode()
		default:
			j.exit = -1
		}
		close(j.done)
	}()
	t.Cleanup(func() { <-j.done })
	return j
}

// code waits for the join's approval code.
func (j *waitingJoin) code(t *testing.T) string {
	t.Helper()
	select {
	case c := <-j.codes:
		return c
	case <-j.done:
		t.Fatalf("join ended (exit %d) before it showed a code:\n%s%s", j.exit, &j.stdout, &j.stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("no approval code within 30s:\n%s", &j.stdout)
	}
	return ""
}

// wait waits for the join to end within d and returns its exit code.
func (j *waitingJoin) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-j.done:
		return j.exit
	case <-time.After(d):
		t.Fatalf("join still running after %s:\n%s", d, &j.stdout)
	}
	return 0
}

// firstCode is the code meshctl printed first on stderr ("CODE: cause").
func firstCode(stderr string) codes.Code {
	line, _, _ := strings.Cut(stderr, "\n")
	c, _, _ := strings.Cut(line, ":")
	return codes.Code(c)
}

// approvalRow is name's token row on nd.
func approvalRow(t *testing.T, nd *Node, name string) apitype.Token {
	t.Helper()
	var toks []apitype.Token
	if err := nd.CtlJSON(t.Context(), &toks, "tokens"); err != nil {
		t.Fatal(err)
	}
	for i := len(toks) - 1; i >= 0; i-- {
		if toks[i].Name == name {
			return toks[i]
		}
	}
	t.Fatalf("no token for %s", name)
	return apitype.Token{}
}

// TestJoinApproval: real binaries in namespaces, two control nodes.
// approved: w1's join (-o json) shows a code, waits (its token row says
// waiting, from w1's address), and finishes once `meshctl approve` on c2
// (not the seed it talks to) is given that code; the node is active and
// reachable over the overlay. burnt: five wrong codes for w2 (text
// output) are refused, the fifth with ApprovalBurnt, and the join ends
// with ApprovalBurnt, w2 recorded nowhere. timeout: nobody approves w3
// within its 1-minute token and the join ends with ApprovalTimeout.
func TestJoinApproval(t *testing.T) {
	n := NewNet(t)
	origin := n.NewNode("origin")
	origin.Start(t)
	origin.MustCtl(t, "init", "--cluster", "e2e")
	c2 := n.NewNode("c2")
	c2.Start(t)
	c2.MustCtl(t, "join", origin.Admit(t, "c2", "--role", "control"))

	t.Run("approved", func(t *testing.T) {
		w1 := n.NewNode("w1")
		w1.Start(t)
		var adm struct {
			Token   string
			Approve bool
		}
		if err := origin.CtlJSON(t.Context(), &adm, "admit", "w1", "--approve"); err != nil || !adm.Approve {
			t.Fatalf("admit --approve: %+v %v", adm, err)
		}
		j := startJoin(t, w1, adm.Token, true)
		code := j.code(t)
		row := approvalRow(t, c2, "w1")
		if row.Approval == nil || row.Approval.State != apitype.ApprovalStateWaiting || len(row.Approval.Waiting) != 1 ||
			row.Approval.Waiting[0].Source != w1.IP {
			t.Fatalf("w1's token while the join waits: %+v %+v", row, row.Approval)
		}
		if out := c2.MustCtl(t, "tokens"); !strings.Contains(out, "waiting: "+w1.IP) {
			t.Fatalf("meshctl tokens does not show the waiting join:\n%s", out)
		}
		out := c2.MustCtl(t, "approve", "w1", code)
		if !strings.Contains(out, "approved the join of w1 from "+w1.IP) {
			t.Fatalf("approve printed:\n%s", out)
		}
		if exit := j.wait(t, 60*time.Second); exit != 0 {
			t.Fatalf("approved join: exit %d\n%s%s", exit, &j.stdout, &j.stderr)
		}
		var res apitype.JoinLine
		lines := strings.Split(strings.TrimSpace(j.stdout.String()), "\n")
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil || res.Result == nil || res.Result.Node != "w1" {
			t.Fatalf("join -o json's last line: %q (%v)", lines[len(lines)-1], err)
		}
		r, _ := nodeRow(t, origin, "w1")
		if r.State != "active" {
			t.Fatalf("w1 after the approved join: %+v", r)
		}
		Eventually(t, 10*time.Second, "origin reaches w1 over the overlay", func() error {
			return origin.Ping(t.Context(), r.OverlayIP)
		})
		if e := findEvent(t, auditOf(t, origin), codes.EventJoinApproved, "w1"); e.Actor != "uid=0@c2" {
			t.Errorf("approval audited as %+v, want the operator on c2", e)
		}
	})

	t.Run("burnt", func(t *testing.T) {
		w2 := n.NewNode("w2")
		w2.Start(t)
		j := startJoin(t, w2, origin.Admit(t, "w2", "--approve"), false)
		code := j.code(t)
		for i := 1; i <= 5; i++ {
			wrong := fmt.Sprintf("%06d", i)
			if wrong == code {
				wrong = "999999"
			}
			want := codes.ApprovalWrongCode
			if i == 5 {
				want = codes.ApprovalBurnt
			}
			_, stderr, exit := c2.Ctl(t.Context(), "approve", "w2", wrong)
			if exit != 1 || firstCode(stderr) != want {
				t.Fatalf("wrong code %d: exit %d, want 1 and %s:\n%s", i, exit, want, stderr)
			}
		}
		if exit := j.wait(t, 30*time.Second); exit != 1 || firstCode(j.stderr.String()) != codes.ApprovalBurnt {
			t.Fatalf("join after five wrong codes: exit %d, want 1 and %s:\n%s%s", exit, codes.ApprovalBurnt, &j.stdout, &j.stderr)
		}
		if row := approvalRow(t, origin, "w2"); row.State != apitype.TokenRevoked || row.Approval.State != apitype.ApprovalStateBurnt {
			t.Fatalf("w2's token after the burn: %+v %+v", row, row.Approval)
		}
		if _, ok := nodeRow(t, origin, "w2"); ok {
			t.Fatal("a burnt token's join was recorded")
		}
		if _, stderr, exit := c2.Ctl(t.Context(), "approve", "w2", code); exit != 1 || firstCode(stderr) != codes.ApprovalNotPending {
			t.Fatalf("the right code after the burn: exit %d\n%s", exit, stderr)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		w3 := n.NewNode("w3")
		w3.Start(t)
		j := startJoin(t, w3, origin.Admit(t, "w3", "--approve", "--ttl", "1m"), true)
		j.code(t)
		if exit := j.wait(t, 90*time.Second); exit != 1 || firstCode(j.stderr.String()) != codes.ApprovalTimeout {
			t.Fatalf("unapproved join: exit %d, want 1 and %s:\n%s%s", exit, codes.ApprovalTimeout, &j.stdout, &j.stderr)
		}
		if _, ok := nodeRow(t, origin, "w3"); ok {
			t.Fatal("an unapproved join was recorded")
		}
	})
}
