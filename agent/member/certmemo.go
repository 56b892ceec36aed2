package member

import (
	"bytes"
	"sync"
)

// pemMemo keeps what was last worked out from some certificates (their
// PEM) and hands it out again while they are the same: parsing a
// certificate and checking its signature for every membership change
// was a tenth of a worker's CPU per change at 10,000 members (issue 54
// item 2, member.BenchmarkWorkerSim): the CA report (runCAReports, woken
// by every config applied) and the IPv6 overlay network (ownOverlay6,
// read by every overlay pass). A look is a comparison of the PEM held
// with the PEM given, a few KB; a certificate renewed or a CA bundle
// adopted is new PEM, worked out again. The zero pemMemo is ready to use.
type pemMemo[T any] struct {
	mu  sync.Mutex
	in  [][]byte // the PEM last worked out from, copied
	out T
	ok  bool
}

// get is f's value for the PEM in: the one kept when in is the PEM it
// was worked out from, else f's, then kept. f reads nothing but in.
func (m *pemMemo[T]) get(f func() T, in ...[]byte) T {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ok && len(m.in) == len(in) {
		same := true
		for i := range in {
			same = same && bytes.Equal(m.in[i], in[i])
		}
		if same {
			return m.out
		}
	}
	m.out, m.ok = f(), true
	m.in = m.in[:0]
	for _, b := range in {
		m.in = append(m.in, bytes.Clone(b))
	}
	return m.out
}
