package gateway

import (
	"context"
	"io"
	"net/http"

	"github.com/agentkv/agentkv/gateway/tenant"
)

// This file is the gateway's side of tenant.Gate (Config.TenantYield):
// where a tenant stands against its fair share decides how its request is
// placed (prefillFirst) and whether it waits for its worker (enterGate);
// its ticket is given back at the reply's first byte, which a vLLM or
// SGLang stream sends with its first token, or at the attempt's end.

// standing returns where t stands against its fair share (Even without a
// gate): Under places the request by the prompt tokens queued on each
// worker (agentkv.Override.PrefillFirst), Over makes it yield.
func (g *Gateway) standing(t *tenant.Tenant) tenant.Standing {
	if g.gate == nil {
		return tenant.Even
	}
	return g.limits.Standing(t)
}

// enterGate takes the request's place at worker: a request of a tenant
// over its share waits there (tenant.Gate.Yield), any other is marked
// protected until its first token. Without a gate it holds nothing. It
// returns ctx.Err() if the client left while it waited.
func (g *Gateway) enterGate(ctx context.Context, st tenant.Standing, worker uint64) (tenant.Ticket, error) {
	if g.gate == nil {
		return tenant.Ticket{}, nil
	}
	if st != tenant.Over {
		return g.gate.Protect(worker), nil
	}
	tk, waited, forced, err := g.gate.Yield(ctx, worker)
	if err == nil {
		outcome := "sent"
		if forced {
			outcome = "forced"
		}
		g.m.tenantYield.WithLabelValues(outcome).Observe(waited.Seconds())
	}
	return tk, err
}

// firstByte gives tk back at the first byte read from r (or its end).
type firstByte struct {
	r  io.Reader
	tk *tenant.Ticket
}

func (f *firstByte) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if n > 0 || err != nil {
		f.tk.Done()
	}
	return n, err
}

// doGated sends req and, when tk holds a place, gives it back at the
// reply's first byte.
func (g *Gateway) doGated(req *http.Request, tk *tenant.Ticket) (*http.Response, error) {
	resp, err := g.cfg.HTTPClient.Do(req)
	if err == nil && tk != nil && *tk != (tenant.Ticket{}) {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{&firstByte{r: resp.Body, tk: tk}, resp.Body}
	}
	return resp, err
}
