package member

// rejoinPerPass bounds the missing peers one rejoin pass probes. A probe
// of a peer that is down is an overlay dial, and so a Nebula handshake
// retried until reachProbe: a control node probed every missing record at
// once, and with 1,000 records no gossip showed (agenttest's light
// workers; a fleet powered off) that was 1,000 handshakes every 30 s, 74%
// of three idle control nodes' CPU in BenchmarkControlScale (issue 54).
// One answer is enough: a push-pull with any member brings the whole
// membership.
const rejoinPerPass = 8

// rejoinLead is how many peers at the head of the missing list are
// probed on every pass: serfPeers lists the control nodes first, and an
// island after a power loss forms around them.
const rejoinLead = 3

// rejoinTurn is where the next pass's rotating window begins among the
// missing peers past the lead. Only rejoin reads and moves it, and rejoin
// runs in one goroutine at a time (startGossip, then runRejoin).
type rejoinTurn struct{ next int }

// pick is the peers of missing this pass probes: the first rejoinLead,
// then a window of the rest that moves on each pass, so every missing peer
// is probed within ceil(len/rejoinPerPass) passes and no pass probes more
// than rejoinPerPass.
func (t *rejoinTurn) pick(missing []string) []string {
	if len(missing) <= rejoinPerPass {
		return missing
	}
	out := append([]string(nil), missing[:rejoinLead]...)
	rest := missing[rejoinLead:]
	start := t.next % len(rest)
	for i := range rejoinPerPass - rejoinLead {
		out = append(out, rest[(start+i)%len(rest)])
	}
	t.next = start + rejoinPerPass - rejoinLead
	return out
}
