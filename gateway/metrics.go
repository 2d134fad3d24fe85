package gateway

import "github.com/prometheus/client_golang/prometheus"

// metrics are the gateway's own metrics, next to the router's.
type metrics struct {
	responses       *prometheus.CounterVec // api, code
	usage           *prometheus.CounterVec // api, kind: prompt, completion, cached
	tokenize        *prometheus.CounterVec // api, source: inprocess, tokenize, approximate
	tokenizerChecks *prometheus.CounterVec // result: match, mismatch, error
	translated      *prometheus.CounterVec // api
	failures        *prometheus.CounterVec // api, kind
	billingStripped prometheus.Counter
	tenantRejected  *prometheus.CounterVec   // reason
	tenantYield     *prometheus.HistogramVec // outcome
	duration        *prometheus.HistogramVec // api
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "agentkv", "gateway"
	m := &metrics{
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "responses_total",
			Help: "Requests answered, by API and HTTP status (the engine's, the gateway's own, 499 for a client that left)."},
			[]string{"api", "code"}),
		usage: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "usage_tokens_total",
			Help: "Token usage the engines reported and the gateway passed to the router, by API and kind (prompt, completion, cached)."},
			[]string{"api", "kind"}),
		tokenize: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "prompt_tokens_source_total",
			Help: "How each request's prompt was tokenized for routing: inprocess (an exact local tokenizer), tokenize (a worker's /tokenize) or approximate (pseudo-tokens of the prompt text, 3 bytes each, because no worker's /tokenize answered)."},
			[]string{"api", "source"}),
		tokenizerChecks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "tokenizer_checks_total",
			Help: "In-process tokenizations compared with the worker's own /tokenize, by result (match; mismatch, which turns that worker's in-process tokenizer off; error, when /tokenize did not answer)."},
			[]string{"result"}),
		translated: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "translated_total",
			Help: "Requests translated to chat completions because the chosen worker does not serve their API natively."},
			[]string{"api"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "failures_total",
			Help: "Routed requests that failed, by API and kind (connect, status, cut, timeout, client_gone, bad_reply, unknown_worker, no_healthy_worker; retried and migrated for attempts another worker took over)."},
			[]string{"api", "kind"}),
		billingStripped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "billing_preamble_stripped_total",
			Help: "Messages requests whose Claude Code billing preamble was removed from the system prompt."}),
		tenantRejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "tenant_rejected_total",
			Help: "Requests refused by tenant checks (Config.Keys, TenantLimits), by reason: unauthorized (401), forbidden (403, an admin path), tenant_in_flight, tenant_sessions, tenant_fair_share (429)."},
			[]string{"reason"}),
		tenantYield: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "tenant_yield_wait_seconds",
			Help:    "How long requests of a tenant over its fair share waited in the gateway for their worker (Config.TenantYield), by outcome: sent (the worker was clear) or forced (MaxHold passed).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 12)},
			[]string{"outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "request_duration_seconds",
			Help: "End-to-end time of routed requests, by API.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 14)},
			[]string{"api"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.responses, m.usage, m.tokenize, m.tokenizerChecks, m.translated, m.failures, m.billingStripped, m.tenantRejected, m.tenantYield, m.duration} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
