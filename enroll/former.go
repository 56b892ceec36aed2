package enroll

import "context"

// Former is implemented by a Ledger that keeps the records of former
// nodes (left, removed, or whose join failed): the admission of such a
// node's name reuses its record, so the node keeps its id (and the
// cluster its overlay IP). A Ledger without it gets a new id for every
// admission.
type Former interface {
	// FormerNodeID is the node id of the former node named name; ok is
	// false when there is none.
	FormerNodeID(ctx context.Context, name string) (id string, ok bool, err error)
}

// admissionID is the node id an admission of name records: the former
// node's when the ledger keeps one, a new one otherwise.
func (s *Server) admissionID(ctx context.Context, name string) (string, error) {
	if f, ok := s.ledger.(Former); ok {
		id, ok, err := f.FormerNodeID(ctx, name)
		if err != nil {
			return "", err
		}
		if ok {
			return id, nil
		}
	}
	return s.nodeID(), nil
}

// formerLookup is an admissionID started ahead, alongside the token
// checks: on a follower both are reads the leader must index first, and
// reads that arrive together share one read index round trip (100 ms on
// TestSites' far site). Its goroutine belongs to the enrollment, which
// waits for it (result) before it returns.
type formerLookup struct {
	name string
	done chan struct{}
	id   string
	err  error
}

// lookAhead starts admissionID(name) for an enrollment; nil when the
// ledger keeps no former nodes or the name is not one a token can hold.
func (s *Server) lookAhead(ctx context.Context, name string) *formerLookup {
	if _, ok := s.ledger.(Former); !ok || ValidName(name) != nil {
		return nil
	}
	l := &formerLookup{name: name, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		l.id, l.err = s.admissionID(ctx, name)
	}()
	return l
}

// wait ends the lookup; safe on nil.
func (l *formerLookup) wait() {
	if l != nil {
		<-l.done
	}
}

// idFor is the admission id of name: the lookup's when it looked up
// name and fresh is set (nothing waited in between, such as an
// operator's approval), a new lookup otherwise.
func (s *Server) idFor(ctx context.Context, l *formerLookup, name string, fresh bool) (string, error) {
	if l == nil || !fresh || l.name != name {
		return s.admissionID(ctx, name)
	}
	l.wait()
	return l.id, l.err
}
