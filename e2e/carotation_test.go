//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/apitype"
	"github.com/meshd/meshd/codes"
)

// TestCARotationPings: `meshctl ca rotate --now` on the CA holder of a
// 5-node cluster (3 control nodes, 2 workers) while the two workers ping
// each other over the overlay every 100 ms. A token minted before the
// rotation joins a third worker during it; once that token is used the
// old CA is dropped. Throughout: the raft leader and term never change on
// any control node, gossip shows every member alive and the control nodes'
// node lists show the workers (out of the pool) alive; at the end every
// node trusts only the new CA and runs TLS and Nebula certificates of it,
// and a token minted afterwards joins. Lost pings are reported (target:
// none) and recorded as ca_rotation_pings_lost.
func TestCARotationPings(t *testing.T) {
	n := NewNet(t)
	nodes := controlCluster(t, n, "w1", "w2")
	origin, w1, w2 := nodes[0], byName(nodes, "w1"), byName(nodes, "w2")
	controls := nodes[:3]
	ips := overlayIPs(t, origin)
	allPairsPing(t, nodes, 20*time.Second)
	oldToken := origin.Admit(t, "w3")
	nebulaBefore := map[string][]byte{}
	for _, nd := range nodes {
		nebulaBefore[nd.NodeName] = readFile(t, nd.Dir, "identity", "nebula", "host.crt")
	}
	first := origin.status(t)
	if first.Leader == "" {
		t.Fatalf("no leader: %+v", first)
	}

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var sent, lost atomic.Int64
	var lostMu sync.Mutex
	var lostAt []string
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, p := range [][2]*Node{{w1, w2}, {w2, w1}} {
				sent.Add(1)
				if err := p[0].Ping(ctx, ips[p[1].NodeName]); err != nil && ctx.Err() == nil {
					lost.Add(1)
					lostMu.Lock()
					lostAt = append(lostAt, fmt.Sprintf("%s %s->%s", time.Now().Format("15:04:05.000"), p[0].NodeName, p[1].NodeName))
					lostMu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	// Watch raft and gossip on every control node while the rotation runs.
	// Gossip: every member it knows alive, and at least the control nodes
	// (the workers are out of the pool, the default); the workers there
	// are now alive in its node list (the lighthouse verdict). Not nodes
	// read as the test goes: w3 is appended when its join returns, which a
	// control node's view need not have caught up with at that instant
	// (and the slice is the test goroutine's).
	var watchErr atomic.Value
	members := len(controls)
	workers := []string{"w1", "w2"}
	wg.Go(func() {
		for ctx.Err() == nil {
			for _, c := range controls {
				var st apitype.Status
				if err := c.CtlJSON(ctx, &st, "status"); err != nil {
					continue // the context ended
				}
				if st.Leader != first.Leader || st.RaftTerm != first.RaftTerm {
					watchErr.CompareAndSwap(nil, fmt.Sprintf("%s: leader %s term %d, was %s term %d", c.NodeName,
						st.Leader, st.RaftTerm, first.Leader, first.RaftTerm))
				}
				if st.Gossip == nil || st.Gossip.Alive < members || st.Gossip.Alive != st.Gossip.Members {
					watchErr.CompareAndSwap(nil, fmt.Sprintf("%s: gossip %+v, want all alive, at least %d", c.NodeName, st.Gossip, members))
				}
				var ns []apitype.Node
				if err := c.CtlJSON(ctx, &ns, "nodes"); err != nil {
					continue // the context ended
				}
				for _, w := range workers {
					if i := slices.IndexFunc(ns, func(x apitype.Node) bool { return x.Name == w }); i < 0 || ns[i].Gossip != "alive" {
						watchErr.CompareAndSwap(nil, fmt.Sprintf("%s's nodes: %s not alive (%+v)", c.NodeName, w, ns))
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	})
	time.Sleep(time.Second) // pings before the rotation

	start := time.Now()
	var st apitype.CAStatus
	if err := origin.CtlJSON(t.Context(), &st, "ca", "rotate", "--now"); err != nil {
		t.Fatalf("ca rotate --now: %v", err)
	}
	t.Logf("ca rotate --now returned after %s: phase %s, next %s, waiting on %v %v %v", time.Since(start).Round(time.Millisecond),
		st.Phase, st.Next[:16], st.Certificates, st.Members, st.Tokens)
	if st.Phase != "reissue" || len(st.Tokens) != 1 {
		t.Fatalf("after rotate --now with w3's token unused: %+v", st)
	}
	w3 := n.NewNode("w3")
	w3.Start(t)
	w3.MustCtl(t, "join", oldToken)
	nodes = append(nodes, w3)
	took := Eventually(t, 60*time.Second, "the old CA dropped", func() error {
		var s apitype.CAStatus
		if err := origin.CtlJSON(t.Context(), &s, "ca", "status"); err != nil {
			return err
		}
		if s.Phase != "none" || s.Current != st.Next {
			return fmt.Errorf("%+v", s)
		}
		return nil
	})
	t.Logf("old CA dropped %s after w3 joined, %s after rotate began", took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	nebulaCA := rotatedNebulaCA(t, origin)
	for _, nd := range nodes {
		Eventually(t, 20*time.Second, nd.NodeName+" runs on the new CA alone", func() error {
			return runsOnlyCA(nd, st.Next, nebulaCA, nebulaBefore[nd.NodeName])
		})
	}
	time.Sleep(2 * time.Second) // pings after the rotation
	cancel()
	wg.Wait()
	lostMu.Lock()
	t.Logf("measured: %d of %d pings lost between w1 and w2 (every 100 ms each way) over %s of rotation; lost at %v",
		lost.Load(), sent.Load(), time.Since(start).Round(time.Millisecond), lostAt)
	lostMu.Unlock()
	Record(t, "ca_rotation_pings_lost", "count", float64(lost.Load()))
	if e := watchErr.Load(); e != nil {
		t.Fatalf("during the rotation: %s", e)
	}
	if lost.Load() > 0 {
		t.Errorf("%d pings lost during the rotation, target none", lost.Load())
	}
	w4 := n.NewNode("w4")
	w4.Start(t)
	w4.MustCtl(t, "join", controls[2].Admit(t, "w4"))
	allPairsPing(t, append(nodes, w4), 20*time.Second)
	if got := origin.status(t); got.Leader != first.Leader || got.RaftTerm != first.RaftTerm {
		t.Fatalf("after the rotation: leader %s term %d, was %s term %d", got.Leader, got.RaftTerm, first.Leader, first.RaftTerm)
	}
}

// runsOnlyCA checks nd's identity on disk: its TLS bundle holds the CA
// whose fingerprint is ca alone and its leaf verifies against it; its
// Nebula bundle is one CA, the same as the CA holder's (nebulaCA), and its
// Nebula host certificate is not the one it had before the rotation
// (nebulaBefore). (The e2e suite links no pki: stdlib parsing only.)
func runsOnlyCA(nd *Node, ca string, nebulaCA []byte, nebulaBefore []byte) error {
	read := func(p ...string) []byte {
		b, _ := os.ReadFile(filepath.Join(append([]string{nd.Dir, "identity"}, p...)...))
		return b
	}
	var cas []*x509.Certificate
	for rest := read("tls", "ca.crt"); ; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return err
		}
		cas = append(cas, c)
	}
	if len(cas) != 1 || fmt.Sprintf("%x", sha256.Sum256(cas[0].Raw)) != ca {
		return fmt.Errorf("trusts %d CAs, want the new one alone", len(cas))
	}
	blk, _ := pem.Decode(read("tls", "node.crt"))
	if blk == nil {
		return fmt.Errorf("no TLS leaf")
	}
	leaf, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return err
	}
	if err := leaf.CheckSignatureFrom(cas[0]); err != nil {
		return fmt.Errorf("runs a TLS leaf of another CA: %v", err)
	}
	if neb := read("nebula", "ca.crt"); !bytes.Equal(bytes.TrimSpace(neb), bytes.TrimSpace(nebulaCA)) {
		return fmt.Errorf("its Nebula CA bundle is not the CA holder's")
	}
	if nebulaBefore != nil && bytes.Equal(read("nebula", "host.crt"), nebulaBefore) {
		return fmt.Errorf("runs the Nebula certificate it had before the rotation")
	}
	return nil
}

func readFile(t testing.TB, path ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(path...))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCARotationRestartedSeed: the only control node is restarted in the
// middle of a rotation (its leaf already reissued under the new CA); a
// token minted before the rotation still joins through it (the leaf it
// held under the old CA was kept in identity/tls/held.crt and taken back),
// and once that token is used the rotation finishes and the file is gone.
func TestCARotationRestartedSeed(t *testing.T) {
	n := NewNet(t)
	nodes := cluster(t, n, "w1")
	origin := nodes[0]
	oldToken := origin.Admit(t, "w2")
	var st apitype.CAStatus
	if err := origin.CtlJSON(t.Context(), &st, "ca", "rotate", "--now"); err != nil {
		t.Fatalf("ca rotate --now: %v", err)
	}
	if st.Phase != "reissue" || len(st.Tokens) != 1 {
		t.Fatalf("after rotate --now: %+v", st)
	}
	held := filepath.Join(origin.Dir, "identity", "tls", "held.crt")
	if _, err := os.Stat(held); err != nil {
		t.Fatalf("no held leaf saved during the rotation: %v", err)
	}
	origin.Stop(t)
	origin.Start(t)
	Eventually(t, 20*time.Second, "origin leads again", func() error {
		if s := origin.status(t); s.Leader != "origin" {
			return fmt.Errorf("leader %q", s.Leader)
		}
		return nil
	})
	w2 := n.NewNode("w2")
	w2.Start(t)
	w2.MustCtl(t, "join", oldToken)
	Eventually(t, 30*time.Second, "the old CA dropped", func() error {
		var s apitype.CAStatus
		if err := origin.CtlJSON(t.Context(), &s, "ca", "status"); err != nil {
			return err
		}
		if s.Phase != "none" {
			return fmt.Errorf("%+v", s)
		}
		return nil
	})
	Eventually(t, 10*time.Second, "held.crt removed", func() error {
		if _, err := os.Stat(held); !os.IsNotExist(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return nil
	})
	allPairsPing(t, append(nodes, w2), 20*time.Second)
}

// TestCARotationWaitsForDownNode: a worker that is down when the rotation
// begins cannot adopt the new trust bundles, so nothing is reissued: `ca
// rotate --now` stops in phase trust with CARotationStalled naming it
// (the overlay between the others untouched). Started again, the worker
// fetches the bundles by itself; the same command then resumes and
// finishes, and every node runs on the new CA.
func TestCARotationWaitsForDownNode(t *testing.T) {
	n := NewNet(t)
	nodes := cluster(t, n, "w1", "w2")
	origin, w2 := nodes[0], nodes[2]
	w2.Stop(t)
	start := time.Now()
	_, errs, code := origin.Ctl(t.Context(), "ca", "rotate", "--now")
	t.Logf("ca rotate --now with w2 down: exit %d after %s: %s", code, time.Since(start).Round(time.Millisecond), errs)
	if code != 1 || !strings.Contains(errs, string(codes.CARotationStalled)) || !strings.Contains(errs, "w2") {
		t.Fatalf("ca rotate --now with w2 down: exit %d\n%s", code, errs)
	}
	var st apitype.CAStatus
	if err := origin.CtlJSON(t.Context(), &st, "ca", "status"); err != nil {
		t.Fatal(err)
	}
	if st.Phase != "trust" || st.Signing != st.Current || !slices.ContainsFunc(st.Members, func(m string) bool { return strings.HasPrefix(m, "w2 ") }) {
		t.Fatalf("status with w2 down: %+v", st)
	}
	allPairsPing(t, nodes[:2], 10*time.Second)

	w2.Start(t)
	if err := origin.CtlJSON(t.Context(), &st, "ca", "rotate", "--now"); err != nil {
		t.Fatalf("ca rotate --now again, w2 back: %v", err)
	}
	if st.Phase != "none" {
		t.Fatalf("after the resumed rotation: %+v", st)
	}
	nebulaCA := rotatedNebulaCA(t, origin)
	for _, nd := range nodes {
		Eventually(t, 20*time.Second, nd.NodeName+" runs on the new CA alone", func() error {
			return runsOnlyCA(nd, st.Current, nebulaCA, nil)
		})
	}
	allPairsPing(t, nodes, 20*time.Second)
}

// rotatedNebulaCA is the CA holder's Nebula CA certificate once a
// finished rotation's keys are in ca/: the holder moves ca/next/ into ca/
// in its reconcile pass after the finish (tidyCADir), so ca/ can still
// hold the old CA right after `ca rotate` returns.
func rotatedNebulaCA(t *testing.T, holder *Node) []byte {
	t.Helper()
	Eventually(t, 10*time.Second, holder.NodeName+"'s ca/next moved into ca/", func() error {
		if _, err := os.Stat(filepath.Join(holder.Dir, "ca", "next")); !os.IsNotExist(err) {
			return fmt.Errorf("ca/next still there: %v", err)
		}
		return nil
	})
	return readFile(t, holder.Dir, "ca", "nebula-ca.crt")
}
