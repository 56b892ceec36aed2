package control

import (
	"context"
	"net/http"
	"time"
)

// A control node's stop (issue 54 item 4), before raft and the rest of
// the node stop, in this order:
//
//  1. Raft leadership goes to another voter (at most HandOffBound;
//     nothing to do when this node does not lead or is the only voter).
//     Writes, admissions among them, move to the new leader within an
//     election's time; handed off last, as before, they waited for raft
//     to shut down, after port 7300 had closed to the writes followers
//     forward to the leader.
//  2. Its watch streams end (EndStreams), and those still waiting for
//     their first line: each held the server's shutdown until its worker
//     went away, 3.0 s (the bound below) with streams open. The workers
//     move to another control node, each after its own random wait
//     (fetched/retry.go).
//  3. Port 7300's server shuts down: answers under way are written, for
//     at most serverStopBound, each connection closed after its answer
//     (no keep-alive); a connection that has not begun a request is
//     closed at once (connSet.cutNew).
//
// Plane.Close, later, hands off again if leadership came back meanwhile.

// HandOffBound is how long a stopping control node waits for another
// voter to take raft leadership (raft's own bound is the election
// timeout, 1 s by default; a config may set it longer).
const HandOffBound = time.Second

// serverStopBound is how long a stopping control node waits for port
// 7300's answers under way.
const serverStopBound = 3 * time.Second

// StopServing hands raft leadership off, ends the watch streams and
// shuts srv (port 7300's server; nil: none) down, in that order.
func (p *Plane) StopServing(srv *http.Server) {
	start := time.Now()
	leading := p.raft.IsLeader()
	if err := p.raft.HandOffWithin(HandOffBound); err != nil {
		p.log.Warn("leadership transfer before stopping failed; the other voters elect a leader once they miss this one", "err", err)
	}
	handedOff := time.Since(start)
	if srv != nil {
		srv.SetKeepAlivesEnabled(false) // a stream's connection closes as its handler returns
	}
	p.EndStreams()
	if srv != nil {
		srv.RegisterOnShutdown(p.conns.cutNew) // run once the listener is closed
		ctx, cancel := context.WithTimeout(context.Background(), serverStopBound)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			p.log.Warn("port 7300's answers under way were cut off at the stop's bound", "bound", serverStopBound, "err", err)
		}
	}
	p.log.Debug("stopped serving", "led", leading, "hand_off", handedOff.Round(time.Millisecond),
		"took", time.Since(start).Round(time.Millisecond))
}
