package sim

import "slices"

// Abort removes r from the engine, queued or running, as vLLM and SGLang
// abort a request: its blocks are released (those it completed stay in the
// prefix cache, as a finished request's do), it produces no further tokens
// and it is never reported in a StepResult. It returns false when r is not
// in the engine (never added, finished, or aborted already). Read
// r.Generated() before: it is 0 after.
func (e *Engine) Abort(r *Request) bool {
	if r.st == nil {
		return false
	}
	if i := slices.Index(e.waiting[e.whead:], r); i >= 0 {
		e.waiting = slices.Delete(e.waiting, e.whead+i, e.whead+i+1)
	} else if i := slices.Index(e.running, r); i >= 0 {
		e.running = slices.Delete(e.running, i, i+1)
	} else {
		return false
	}
	if e.memo.r == r {
		e.forget()
	}
	e.freeBlocks(r.st)
	r.st = nil
	return true
}
