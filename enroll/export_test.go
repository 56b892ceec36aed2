package enroll

import "time"

// MaxResponseBody exposes the client's response size limit to the external
// tests.
const MaxResponseBody = maxResponseBody

// ThrottledSources is how many sources the failed-token throttle tracks.
func (s *Server) ThrottledSources() int { return s.throttle.size() }

// ApprovalPoll is the long-poll bound the server holds a waiting join for.
func (s *Server) ApprovalPoll() time.Duration { return s.cfg.ApprovalPoll }
