//go:build e2e

package e2e

import (
	"bufio"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// joinTimed runs `meshctl join TOKEN` on nd, as MustCtl does, and returns
// its stepped output with each line's elapsed time since the command
// started ("+0.412s underlay address ..."), so that a slow join says
// which of its steps took the time. It fails the test unless the join
// exits 0.
func (nd *Node) joinTimed(t testing.TB, token string) (took time.Duration, steps string) {
	t.Helper()
	cmd := nd.Exec(t.Context(), filepath.Join(binDir, "meshctl"), "--socket", nd.Socket, "join", token)
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		fmt.Fprintf(&b, "+%.3fs %s\n", time.Since(start).Seconds(), sc.Text())
	}
	err = cmd.Wait()
	took = time.Since(start)
	if err != nil {
		t.Fatalf("%s: meshctl join: %v\n%s%s", nd.NodeName, err, b.String(), errb.String())
	}
	return took, b.String()
}
