//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
)

// seedStop is how long the control node is stopped: longer than the
// second after which a seed's answer counts as slow, shorter than a TLS
// handshake's timeout and the join's budget for asking its seeds again.
const seedStop = 1500 * time.Millisecond

// TestJoinWhileSeedStopped (issue 54 item 5): the only control node is
// stopped (SIGSTOP) for 1.5 s while a worker joins, its kernel still
// accepting connections that nothing answers: a control node busy for a
// second. The join succeeds, with no SeedsUnreachable, NoLeader or
// OverlayUDPBlocked; a wait the enroll step saw is a SeedSlow warning
// with the time. "at-enroll" stops it as the join generated its keys,
// the step before it connects to the seed; "before-join" stops it before
// the join starts (its path check and its enrollment wait).
func TestJoinWhileSeedStopped(t *testing.T) {
	n := NewNet(t)
	origin := n.NewNode("origin")
	origin.Start(t)
	origin.MustCtl(t, "init", "--cluster", "e2e")
	var (
		mu      sync.Mutex
		stopped bool
	)
	cont := func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			_ = origin.cmd.Process.Signal(syscall.SIGCONT)
			stopped = false
		}
	}
	stop := func() {
		mu.Lock()
		defer mu.Unlock()
		if err := origin.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Errorf("SIGSTOP: %v", err)
			return
		}
		stopped = true
		time.AfterFunc(seedStop, cont)
	}
	t.Cleanup(cont) // the control node never stays stopped past the test

	for _, tc := range []struct{ name, at string }{
		{"at-enroll", "generated TLS and Nebula keys"},
		{"before-join", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "w-" + tc.name
			w := n.NewNode(name)
			w.Start(t)
			tok := origin.Admit(t, name)
			cmd := w.Exec(t.Context(), filepath.Join(binDir, "meshctl"), "--socket", w.Socket, "join", tok)
			var errb strings.Builder
			cmd.Stderr = &errb
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if tc.at == "" {
				stop()
			}
			start := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var steps strings.Builder
			seen := tc.at == ""
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				fmt.Fprintf(&steps, "+%.3fs %s\n", time.Since(start).Seconds(), sc.Text())
				if !seen && strings.Contains(sc.Text(), tc.at) {
					seen = true
					stop()
				}
			}
			err = cmd.Wait()
			took := time.Since(start)
			cont()
			if err != nil || !seen {
				t.Fatalf("join with the control node stopped for %s: %v (stopped: %v)\n%s%s", seedStop, err, seen, &steps, &errb)
			}
			for _, c := range []codes.Code{codes.SeedsUnreachable, codes.NoLeader, codes.OverlayUDPBlocked} {
				if strings.Contains(errb.String(), string(c)) {
					t.Errorf("the join said %s:\n%s%s", c, &steps, &errb)
				}
			}
			Eventually(t, 30*time.Second, name+" active", func() error {
				if r, ok := nodeRowErr(origin, name); !ok || r.State != "active" {
					return fmt.Errorf("raft records %+v", r)
				}
				return nil
			})
			slow := "no SeedSlow warning: the wait fell outside the enroll step's connection and clock"
			for _, l := range strings.Split(errb.String(), "\n") {
				if strings.Contains(l, string(codes.SeedSlow)) || strings.Contains(l, string(codes.NetcheckSlow)) {
					slow = l
				}
			}
			t.Logf("joined in %s with the control node stopped %s; %s", took.Round(time.Millisecond), seedStop, slow)
		})
	}
}
