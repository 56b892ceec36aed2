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
