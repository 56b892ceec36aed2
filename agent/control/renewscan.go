package control

import (
	"sync"
	"time"
)

// renewScan lets a renewal pass skip its scan of every record when
// nothing it reads changed: raft's index is the one it scanned at, and
// no certificate has fallen due since (next). The CA holder's TLS check
// ran every 30 s and parsed every node's leaf, its Nebula check on every
// follow pass (every raft change on a control node): O(N) work on a
// timer, 10,000 x509 parses a pass at 10,000 members (issue 54). A write
// during a scan (a renewal it made) moves the index, so the next pass
// scans once more and settles.
type renewScan struct {
	mu    sync.Mutex
	valid bool
	index uint64
	next  time.Time // the earliest instant a record falls due; zero: none will
	scans int       // how many scans ran (tests)
	skips int       // how many passes skipped theirs (tests)
}

// skip reports whether a pass at index and now may skip its scan, and
// the next instant a scan is due when it may.
func (s *renewScan) skip(index uint64, now time.Time) (bool, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.valid && s.index == index && (s.next.IsZero() || now.Before(s.next)) {
		s.skips++
		return true, s.next
	}
	s.scans++
	return false, time.Time{}
}

// scanned records a scan made at index (read before the scan) and the
// earliest instant it found a record falls due.
func (s *renewScan) scanned(index uint64, next time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.valid, s.index, s.next = true, index, next
}

// counts is how many scans ran and how many passes skipped theirs.
func (s *renewScan) counts() (scans, skips int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scans, s.skips
}
