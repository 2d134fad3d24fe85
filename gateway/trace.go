package gateway

import (
	"sync"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/trace"
)

// TraceSink passes the Router's request records on to a sink (a
// *trace.Writer, say) after adding what only the gateway knows: the API the
// request came in on and, for a failure, its error kind. Give the same
// TraceSink to the Router (agentkv.Config.Trace) and to the gateway
// (Config.Trace). It is safe for concurrent use.
type TraceSink struct {
	next  agentkv.TraceSink
	notes sync.Map // request id → note; each entry is taken by the record it annotates
}

type note struct {
	api  API
	kind string
}

// NewTraceSink returns a TraceSink writing to next.
func NewTraceSink(next agentkv.TraceSink) *TraceSink { return &TraceSink{next: next} }

// note records the API and error kind of a request about to be reported
// to the router (which writes its record from Decision.Done).
func (t *TraceSink) note(id string, api API, kind string) {
	t.notes.Store(id, note{api: api, kind: kind})
}

// Write implements agentkv.TraceSink.
func (t *TraceSink) Write(r *trace.Record) error {
	if v, ok := t.notes.LoadAndDelete(r.Request.RequestID); ok {
		n := v.(note)
		r.Request.API, r.Request.ErrorKind = n.api.String(), n.kind
	}
	return t.next.Write(r)
}
