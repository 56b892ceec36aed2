package enroll

// MaxResponseBody exposes the client's response size limit to the external
// tests.
const MaxResponseBody = maxResponseBody

// ThrottledSources is how many sources the failed-token throttle tracks.
func (s *Server) ThrottledSources() int { return s.throttle.size() }
