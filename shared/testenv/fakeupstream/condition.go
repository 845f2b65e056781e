package fakeupstream

// Condition is what an upstream does in a fallback test: answer the next
// request with Reply (a status, a stall, a text), or be down (connections
// refused).
type Condition struct {
	Reply Reply
	Down  bool
}

// Apply puts s in the condition.
func (c Condition) Apply(s *Server) {
	s.Sequence(c.Reply)
	if c.Down {
		s.Close()
	}
}
