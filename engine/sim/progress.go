package sim

// Generated returns the output tokens r has sampled so far: 0 before its
// first token (and for a rejected request), max(1, OutputTokens) once it
// has finished. A real-time driver (the mock worker) reads it after each
// Step to stream the tokens that step produced.
func (r *Request) Generated() int {
	switch {
	case r.st != nil:
		return r.st.generated
	case r.Finished > 0 && !r.Rejected:
		return max(1, r.OutputTokens)
	}
	return 0
}
