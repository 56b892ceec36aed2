//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
)

// TestSignals (issue 12 item 5).
//
// hup-burst: 100 SIGHUPs within a second on a running control node (the
// raft leader) whose config file changed log_level before the burst. meshd
// does not die, keeps its leadership in the same term, and applies the
// change exactly once: one reload reports log_level applied, and every
// reload after it finds nothing to apply (signals that arrive during a
// reload coalesce into one more reload after it, never a queue of 100).
// The burst's reloads are counted up to one more reload, after the burst,
// that sets log_level back: the mark that the last of them was logged.
//
// term-during-join: SIGTERM to the joiner while its join runs (before the
// enroll call, and during step 10 after its identity was saved); meshd
// exits, is started again, and the same `meshctl join TOKEN` completes, or
// answers AlreadyJoined for the member the first run made; either way the
// node ends an active, running member and the join invariants hold.
func TestSignals(t *testing.T) {
	n := NewNet(t)
	origin := n.NewNode("origin")
	origin.Start(t)
	origin.MustCtl(t, "init", "--cluster", "e2e")

	t.Run("hup-burst", func(t *testing.T) {
		before, err := statusOf(origin)
		if err != nil {
			t.Fatal(err)
		}
		if before.Raft != "leader" {
			t.Fatalf("origin is %s, want leader", before.Raft)
		}
		cfg, err := os.ReadFile(origin.Config)
		if err != nil {
			t.Fatal(err)
		}
		changed := strings.Replace(string(cfg), "log_level: debug", "log_level: info", 1)
		if changed == string(cfg) {
			t.Fatal("config has no log_level: debug to change")
		}
		if err := os.WriteFile(origin.Config, []byte(changed), 0o600); err != nil {
			t.Fatal(err)
		}
		logBefore := logSize(t, origin)
		start := time.Now()
		for range 100 {
			if err := origin.cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
			time.Sleep(9 * time.Millisecond)
		}
		sent := time.Since(start)
		if sent > time.Second+100*time.Millisecond {
			t.Fatalf("100 SIGHUPs took %s, want about a second", sent)
		}
		// The burst's reloads go on after the last signal (one running, one
		// coalesced behind it), so counting them once the first is logged
		// saw only some. Its end is marked instead: once the change was
		// applied, the config goes back to log_level debug (written whole,
		// as a reload may be reading it) and one more SIGHUP follows; SIGHUP
		// reloads run one at a time, in order, so every reload of the burst
		// is logged before the one that applies debug.
		reloaded := func(l string) bool { return strings.Contains(l, `msg="config reloaded"`) }
		appliedTo := func(l, level string) bool {
			return reloaded(l) && strings.Contains(l, "applied=log_level") && strings.Contains(l, "log_level="+level)
		}
		Eventually(t, 5*time.Second, "the burst's change applied", func() error {
			if !slices.ContainsFunc(logLinesSince(t, origin, logBefore), func(l string) bool { return appliedTo(l, "info") }) {
				return fmt.Errorf("no reload applied log_level info")
			}
			return nil
		})
		marker := origin.Config + ".new"
		if err := os.WriteFile(marker, cfg, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(marker, origin.Config); err != nil {
			t.Fatal(err)
		}
		if err := origin.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		var burst []string
		Eventually(t, 5*time.Second, "the reload after the burst (log_level back to debug) logged", func() error {
			lines := logLinesSince(t, origin, logBefore)
			i := slices.IndexFunc(lines, func(l string) bool { return appliedTo(l, "debug") })
			if i < 0 {
				return fmt.Errorf("no reload applied log_level debug")
			}
			burst = lines[:i]
			return nil
		})
		var reloads, applied int
		for _, l := range burst {
			if reloaded(l) {
				reloads++
				if strings.Contains(l, "applied=log_level") {
					applied++
				}
			}
		}
		select {
		case err := <-origin.exited:
			t.Fatalf("meshd exited during the SIGHUP burst: %v", err)
		default:
		}
		after, err := statusOf(origin)
		if err != nil {
			t.Fatalf("status after the burst: %v", err)
		}
		if after.Raft != "leader" || after.RaftTerm != before.RaftTerm {
			t.Fatalf("after the burst origin is %s in term %d, was leader in term %d", after.Raft, after.RaftTerm, before.RaftTerm)
		}
		if applied != 1 || reloads > 100 {
			t.Fatalf("the burst made %d reloads, %d of them applied log_level; want 1 applied, at most 100 reloads", reloads, applied)
		}
		t.Logf("100 SIGHUPs in %s: %d reloads, log_level applied once, still leader in term %d", sent.Round(time.Millisecond), reloads, after.RaftTerm)
	})

	var joiners []*Node
	for i, c := range []struct{ name, at string }{
		{"term-before-enroll", "generated TLS and Nebula keys"},
		{"term-during-confirm", "identity saved"},
	} {
		t.Run(c.name, func(t *testing.T) {
			name := fmt.Sprintf("s%d", i)
			j := n.NewNode(name)
			j.Start(t)
			joiners = append(joiners, j)
			tok := origin.Admit(t, name)

			cmd := j.Exec(t.Context(), filepath.Join(binDir, "meshctl"), "--socket", j.Socket, "join", tok)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			seen := false
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if strings.Contains(sc.Text(), c.at) && !seen {
					seen = true
					_ = j.cmd.Process.Signal(syscall.SIGTERM)
				}
			}
			_ = cmd.Wait()
			if !seen {
				t.Fatalf("the join printed no step %q", c.at)
			}
			select {
			case <-j.exited:
				j.cmd = nil
			case <-time.After(20 * time.Second):
				t.Fatalf("meshd %s ignored SIGTERM during a join for 20s", name)
			}
			j.Start(t)
			o, errs, code := j.Ctl(t.Context(), "join", tok)
			switch {
			case code == 0:
				t.Logf("%s: the same join run again completed", c.name)
			case code == 1 && strings.HasPrefix(errs, string(codes.AlreadyJoined)+": "):
				t.Logf("%s: the restarted node was already the member the first run made", c.name)
			default:
				t.Fatalf("%s: the same join run again: exit %d, want 0 or AlreadyJoined\n%s%s", c.name, code, o, errs)
			}
			Eventually(t, 30*time.Second, name+" an active running member", func() error {
				st, err := statusOf(j)
				if err != nil {
					return err
				}
				r, ok := nodeRowErr(origin, name)
				if st.State != "running" || !ok || r.State != "active" || r.ID != st.NodeID {
					return fmt.Errorf("%s is %s as %s; raft records %+v", name, st.State, st.NodeID, r)
				}
				return nil
			})
			checkJoinInvariants(t, origin, joiners)
		})
	}
}

func logSize(t testing.TB, nd *Node) int64 {
	t.Helper()
	st, err := os.Stat(nd.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

func logLinesSince(t testing.TB, nd *Node, off int64) []string {
	t.Helper()
	b, err := os.ReadFile(nd.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(b[min(off, int64(len(b))):]), "\n")
}
