//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meshd/meshd/codes"
	"github.com/meshd/meshd/pki"
)

// nodeIdentity is the TLS identity a node keeps in its state dir.
func nodeIdentity(t testing.TB, nd *Node) *pki.Identity {
	t.Helper()
	id, err := pki.LoadIdentity(filepath.Join(nd.Dir, "identity"))
	if err != nil {
		t.Fatalf("identity of %s: %v", nd.NodeName, err)
	}
	return id
}

// dialFrom opens a TCP connection to addr from inside host's namespace.
func dialFrom(host *Host, addr string) (net.Conn, error) {
	var c net.Conn
	err := inNetns(host.Name, func() (err error) {
		c, err = (&net.Dialer{Timeout: 2 * time.Second}).Dial("tcp", addr)
		return err
	})
	return c, err
}

// apiAnswer GETs /v1/nodes on addr from host with id's leaf, on a new
// connection, and returns the HTTP status and the error code of a refusal.
func apiAnswer(host *Host, id *pki.Identity, addr string) (int, codes.Code, error) {
	conf, err := pki.ClientTLSConfig(id, pki.RoleControl)
	if err != nil {
		return 0, "", err
	}
	tr := &http.Transport{TLSClientConfig: conf, DisableKeepAlives: true,
		DialContext: func(context.Context, string, string) (net.Conn, error) { return dialFrom(host, addr) }}
	defer tr.CloseIdleConnections()
	cl := &http.Client{Transport: tr, Timeout: 3 * time.Second}
	resp, err := cl.Get("https://" + addr + "/v1/nodes")
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var body struct {
		Code codes.Code `json:"code"`
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = json.Unmarshal(raw, &body)
	return resp.StatusCode, body.Code, nil
}

// raftRefused reports whether addr's raft port refuses id's leaf from
// host: the handshake fails, or the connection is closed at once. An
// accepted connection waits for raft's first request (the read times out).
func raftRefused(host *Host, id *pki.Identity, addr string) (bool, error) {
	conf, err := pki.ClientTLSConfig(id, pki.RoleControl)
	if err != nil {
		return false, err
	}
	raw, err := dialFrom(host, addr)
	if err != nil {
		return false, err
	}
	tc := tls.Client(raw, conf)
	defer tc.Close()
	_ = tc.SetDeadline(time.Now().Add(2 * time.Second))
	if err := tc.Handshake(); err != nil {
		return true, nil
	}
	_ = tc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err = tc.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded), nil
}

// TestRemovedNodeCutOffEverywhere: a control node and a worker, removed
// while they run with their files, are refused with NotMember on port 7300
// and at the handshake or at once on port 7301 of every control node,
// within 2 s of `meshctl remove` returning. It measures that time per
// control node.
func TestRemovedNodeCutOffEverywhere(t *testing.T) {
	n := NewNet(t)
	nodes := controlCluster(t, n, "w1")
	origin, c3 := nodes[0], nodes[2]
	controls := []*Node{origin, c3}
	allPairsPing(t, nodes, 10*time.Second)
	ips := overlayIPs(t, origin)
	remaining := slices.Clone(nodes)
	for _, victim := range []*Node{nodes[1], nodes[3]} { // c2, then w1
		remaining = slices.DeleteFunc(remaining, func(nd *Node) bool { return nd == victim })
		id := nodeIdentity(t, victim)
		// Before: a member, on both ports of every control node.
		for _, cn := range controls {
			api := net.JoinHostPort(cn.IP, "7300")
			if st, code, err := apiAnswer(victim.Host, id, api); err != nil || st != http.StatusOK {
				t.Fatalf("%s on %s before its removal: %d %s %v", victim.NodeName, cn.NodeName, st, code, err)
			}
			if victim.NodeName == "c2" {
				if refused, err := raftRefused(victim.Host, id, net.JoinHostPort(cn.IP, "7301")); err != nil || refused {
					t.Fatalf("c2's raft connection to %s refused before its removal (%v)", cn.NodeName, err)
				}
			}
		}

		origin.MustCtl(t, "remove", victim.NodeName)
		removed := time.Now()
		var wg sync.WaitGroup
		took := make([]time.Duration, len(controls))
		errs := make([]error, len(controls))
		for i, cn := range controls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				took[i], errs[i] = waitRefused(victim, id, cn, removed)
			}()
		}
		wg.Wait()
		for i, cn := range controls {
			if errs[i] != nil {
				t.Errorf("%s on %s: %v", victim.NodeName, cn.NodeName, errs[i])
				continue
			}
			t.Logf("%s removed: refused on %s's 7300 and 7301 %s after `meshctl remove` returned",
				victim.NodeName, cn.NodeName, took[i].Round(time.Millisecond))
		}
		// Cut from the overlay on every remaining member within the same
		// 2 s (checked on all members at once: each failed ping costs its
		// 200 ms timeout), and from gossip within the failure-detection
		// bound of the suite's gossip timers: the key rotation remove ends
		// with stops the victim answering probes, and gossip then has to
		// detect it, which a fixed 2 s left little room for on a busy core.
		gossipBound := n.gossipFailBound(len(remaining) + 1)
		cutErrs := make([]error, len(remaining))
		for i, nd := range remaining {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := waitFor(t.Context(), time.Until(removed.Add(2*time.Second)), func() error {
					if nd.Ping(t.Context(), ips[victim.NodeName]) == nil {
						return fmt.Errorf("%s still reaches %s over the overlay within 2 s", nd.NodeName, victim.NodeName)
					}
					return nil
				})
				if err == nil {
					_, err = waitFor(t.Context(), time.Until(removed.Add(gossipBound)), func() error {
						if g := gossipStateOf(t, nd, victim.NodeName); g == "alive" {
							return fmt.Errorf("%s still sees %s alive in gossip after %s", nd.NodeName, victim.NodeName, gossipBound)
						}
						return nil
					})
				}
				cutErrs[i] = err
			}()
		}
		wg.Wait()
		if err := errors.Join(cutErrs...); err != nil {
			t.Fatalf("not cut off after `meshctl remove` returned: %v", err)
		}
		t.Logf("%s removed: unreachable over the overlay and not alive in gossip on %d members %s after `meshctl remove` returned",
			victim.NodeName, len(remaining), time.Since(removed).Round(time.Millisecond))
	}
}

// waitRefused polls cn's two ports with victim's leaf from victim's host
// until both refuse it, and returns the time since removed; more than
// 2 s is an error.
func waitRefused(victim *Node, id *pki.Identity, cn *Node, removed time.Time) (time.Duration, error) {
	api, raft := net.JoinHostPort(cn.IP, "7300"), net.JoinHostPort(cn.IP, "7301")
	var last string
	for time.Since(removed) < 2*time.Second {
		st, code, err := apiAnswer(victim.Host, id, api)
		apiOK := err == nil && st == http.StatusForbidden && code == codes.NotMember
		raftOK, rerr := raftRefused(victim.Host, id, raft)
		if apiOK && raftOK && rerr == nil {
			return time.Since(removed), nil
		}
		last = fmt.Sprintf("7300: %d %s %v; 7301 refused %v %v", st, code, err, raftOK, rerr)
		time.Sleep(20 * time.Millisecond)
	}
	return 0, fmt.Errorf("not refused on both ports within 2s of the removal (last: %s)", last)
}
