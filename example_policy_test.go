package agentkv_test

import (
	"fmt"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/admission"
	"github.com/agentkv/agentkv/session"
)

// capPolicy is a user's own admission policy: at most max requests in
// flight, the others deferred first come, first served.
type capPolicy struct {
	max     int
	running map[string]bool
	queue   []string
}

func (p *capPolicy) Admit(req admission.Request) admission.Verdict {
	if len(p.running) < p.max {
		p.running[req.ID] = true
		return admission.Ready
	}
	p.queue = append(p.queue, req.ID)
	return admission.Defer
}

func (p *capPolicy) OnEvent(ev admission.Event, wake []string) []string {
	switch ev.Kind {
	case admission.Completed, admission.Aborted:
		delete(p.running, ev.ID)
		for i, id := range p.queue {
			if id == ev.ID { // withdrawn while deferred
				p.queue = append(p.queue[:i], p.queue[i+1:]...)
				break
			}
		}
	}
	for len(p.running) < p.max && len(p.queue) > 0 {
		id := p.queue[0]
		p.queue = p.queue[1:]
		p.running[id] = true
		wake = append(wake, id)
	}
	return wake
}

// A policy of one's own, embedded in the Router without forking: one
// request at a time; the second waits until the first is done.
func ExampleConfig_admissionPolicy() {
	released := make(chan string, 1)
	r, err := agentkv.New(agentkv.Config{
		BlockSize:       16,
		AdmissionPolicy: &capPolicy{max: 1, running: map[string]bool{}},
		OnRelease:       func(id string, err error) { released <- id },
	})
	if err != nil {
		panic(err)
	}
	r.AddWorker(agentkv.WorkerFunc(func() agentkv.WorkerInfo {
		return agentkv.WorkerInfo{ID: 1, BlockSize: 16, KVCapacityTokens: 100_000}
	}))
	prompt := make([]uint32, 40)
	a, err := r.TryRoute(&agentkv.Request{ID: "a", Tokens: prompt, Agent: session.AgentContext{SessionID: "s1"}})
	fmt.Println("a:", err)
	b := &agentkv.Request{ID: "b", Tokens: prompt, Agent: session.AgentContext{SessionID: "s2"}}
	_, err = r.TryRoute(b)
	fmt.Println("b:", err)
	a.Done(agentkv.Usage{PromptTokens: 40, CompletionTokens: 8})
	fmt.Println("released:", <-released)
	_, err = r.TryRoute(b)
	fmt.Println("b:", err)
	// Output:
	// a: <nil>
	// b: agentkv: request held by admission control
	// released: b
	// b: <nil>
}
