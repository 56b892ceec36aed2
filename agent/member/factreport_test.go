package member

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshd/meshd/agent/control"
	"github.com/meshd/meshd/agent/state"
)

// TestFactReporterPostsOnChange: a worker posts its facts when what it
// runs changes, retries a failed post, and posts nothing while what it
// runs is what a control node took, however often reportCA looks (every
// caReportCheck, on every overlay apply): no timer posts.
func TestFactReporterPostsOnChange(t *testing.T) {
	posts := make(chan control.FactsRequest, 16)
	var failures atomic.Int32
	failures.Store(1) // the first post finds no control node
	f := newFactReporter("v2", func(ca string) ([]byte, error) { return []byte("sig:" + ca), nil },
		func(_ context.Context, req control.FactsRequest, _ int) error {
			posts <- req
			if failures.Add(-1) >= 0 {
				return errors.New("no control node answered")
			}
			return nil
		}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	f.jitter, f.retryMin = 0, 10*time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go f.run(ctx)

	next := func(what string) control.FactsRequest {
		t.Helper()
		select {
		case req := <-posts:
			return req
		case <-time.After(5 * time.Second):
			t.Fatalf("no post within 5 s: %s", what)
			return control.FactsRequest{}
		}
	}
	settled := func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !f.settled() {
			if time.Now().After(deadline) {
				t.Fatal("the reporter did not settle within 5 s")
			}
			time.Sleep(time.Millisecond)
		}
	}

	f.offer("b1.t1.n1") // at start
	next("at start, failed")
	if req := next("the retry"); req.Version != "v2" || req.CA != "b1.t1.n1" || string(req.CASig) != "sig:b1.t1.n1" {
		t.Fatalf("posted %+v", req)
	}
	settled()
	for range 100 { // reportCA looking again and again
		f.offer("b1.t1.n1")
	}
	if len(f.wake) != 0 {
		t.Fatal("offering what was sent queued a post")
	}
	f.offer("b2.t1.n1") // a CA bundle adopted
	if req := next("the change"); req.CA != "b2.t1.n1" {
		t.Fatalf("posted %+v", req)
	}
	settled()
	f.mu.Lock()
	n := f.posts
	f.mu.Unlock()
	if n != 3 || len(posts) != 0 {
		t.Errorf("%d posts (%d unread), want 3: the first, its retry, the change", n, len(posts))
	}
}

// TestFactReporterPoolFacts: a worker out of the pool posts its pool
// facts (out of the pool, its NAT, the revocation version it blocks)
// with the rest, each change once.
func TestFactReporterPoolFacts(t *testing.T) {
	posts := make(chan control.FactsRequest, 16)
	f := newFactReporter("v2", func(ca string) ([]byte, error) { return []byte("sig:" + ca), nil },
		func(_ context.Context, req control.FactsRequest, _ int) error { posts <- req; return nil },
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	f.jitter = 0
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go f.run(ctx)
	next := func() control.FactsRequest {
		t.Helper()
		select {
		case req := <-posts:
			return req
		case <-time.After(5 * time.Second):
			t.Fatal("no post within 5 s")
			return control.FactsRequest{}
		}
	}
	f.change(func(w *factsSent) { w.pool, w.nat = state.PoolOut, string(natSymmetric) })
	if req := next(); req.Pool != state.PoolOut || req.NAT != "sym" || req.Version != "v2" {
		t.Fatalf("posted %+v", req)
	}
	f.change(func(w *factsSent) { w.revoked = 7 })
	if req := next(); req.Revoked != 7 || req.Pool != state.PoolOut || req.NAT != "sym" {
		t.Fatalf("posted %+v; want every fact with the new version", req)
	}
	f.change(func(w *factsSent) { w.revoked = 7 })
	if len(f.wake) != 0 {
		t.Fatal("the same version again queued a post")
	}
}

// TestNATWordsAgree: the NAT words a control node takes in a facts
// report (control.NATWords) are this package's NAT values.
func TestNATWordsAgree(t *testing.T) {
	ours := []string{string(natUnknown), string(natOpen), string(natPreserve), string(natIndep), string(natSymmetric)}
	if !slices.Equal(slices.Sorted(slices.Values(ours)), slices.Sorted(slices.Values(control.NATWords))) {
		t.Fatalf("member's NAT words %v, control's %v", ours, control.NATWords)
	}
}
