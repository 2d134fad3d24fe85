package agentkv

import (
	"errors"
	"strconv"
	"time"

	"github.com/agentkv/agentkv/admission"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the router's Prometheus metrics. Create them with NewMetrics,
// pass them in Config.Metrics, and they are registered on the given
// registerer. All methods are safe for concurrent use.
type Metrics struct {
	overhead     *prometheus.HistogramVec // stage: hash, match, schedule, total
	routed       *prometheus.CounterVec   // policy outcome: affinity, cost
	promptTokens prometheus.Counter
	cachedTokens *prometheus.CounterVec // tier
	sharedBlocks prometheus.Counter
	held         prometheus.Counter
	decisions    *prometheus.CounterVec // admission decision kind
	probes       prometheus.Counter     // turns run as probes (admission.Door.Probe)
	waiting      prometheus.Gauge
	engineUsed   *prometheus.GaugeVec   // worker
	events       *prometheus.CounterVec // worker, result: applied, rejected reason
	gaps         *prometheus.CounterVec // worker
	finished     *prometheus.CounterVec // outcome: ok, failed
	hints        prometheus.Counter
}

// NewMetrics creates the router metrics and registers them on reg (nil: a
// private registry, useful in tests).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	buckets := prometheus.ExponentialBuckets(1e-7, 2, 22) // 100 ns … 0.2 s
	m := &Metrics{
		overhead: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "agentkv", Subsystem: "router", Name: "overhead_seconds",
			Help: "Router overhead per request by stage (hash, match, schedule, total).", Buckets: buckets,
		}, []string{"stage"}),
		routed: counterVec("router", "requests_routed_total",
			"Requests routed, by how the worker was chosen (via: affinity or policy) and why (reason: session, inferred, prefix, load, held).", "via", "reason"),
		promptTokens: counter("router", "prompt_tokens_total", "Prompt tokens of routed requests."),
		cachedTokens: counterVec("router", "cached_tokens_total",
			"Prompt tokens the chosen worker held, by tier (hit rate = this / prompt_tokens_total).", "tier"),
		sharedBlocks: counter("router", "shared_pool_credit_blocks_total", "Shared-pool blocks credited beyond the chosen worker's own prefix."),
		held:         counter("admission", "requests_held_total", "Requests held by admission control."),
		decisions: counterVec("admission", "decisions_total",
			"Admission decisions by kind (admit, queue, hold, pause, mark, resume, ...).", "kind"),
		probes: counter("admission", "probes_total",
			"Turns of programs waiting at the door that ran as probes (a rollout batch's programs started early, admission.Door.Probe)."),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "agentkv", Subsystem: "admission", Name: "queue_depth",
			Help: "Programs with a held turn (queued or paused) after the last tick.",
		}),
		engineUsed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "agentkv", Subsystem: "admission", Name: "engine_kv_used_tokens",
			Help: "KV in use that each worker's engine last reported (kv_cache_usage_perc × capacity); admission places programs as if at least this were used.",
		}, []string{"worker"}),
		events:   counterVec("index", "events_total", "KV events per worker by result (applied or the rejection reason).", "worker", "result"),
		gaps:     counterVec("index", "event_gaps_total", "KV event id gaps per worker.", "worker"),
		finished: counterVec("router", "requests_finished_total", "Requests reported done, by outcome.", "outcome"),
		hints:    counter("hints", "actions_sent_total", "KV hint actions delivered to worker sinks."),
	}
	for _, c := range []prometheus.Collector{m.hints, m.overhead, m.routed, m.promptTokens, m.cachedTokens, m.sharedBlocks,
		m.held, m.decisions, m.probes, m.waiting, m.engineUsed, m.events, m.gaps, m.finished} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func counter(subsystem, name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "agentkv", Subsystem: subsystem, Name: name, Help: help})
}

func counterVec(subsystem, name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "agentkv", Subsystem: subsystem, Name: name, Help: help}, labels)
}

func (m *Metrics) observeRoute(d *Decision, blocks int, hash, match, sched, total time.Duration) {
	m.overhead.WithLabelValues("hash").Observe(hash.Seconds())
	m.overhead.WithLabelValues("match").Observe(match.Seconds())
	m.overhead.WithLabelValues("schedule").Observe(sched.Seconds())
	m.overhead.WithLabelValues("total").Observe(total.Seconds())
	via := "policy"
	if d.Affinity {
		via = "affinity"
	}
	m.routed.WithLabelValues(via, d.Reason.String()).Inc()
	m.promptTokens.Add(float64(d.prompt))
	m.cachedTokens.WithLabelValues("device").Add(float64(d.Cached.Device))
	m.cachedTokens.WithLabelValues("host").Add(float64(d.Cached.Host))
	m.cachedTokens.WithLabelValues("disk").Add(float64(d.Cached.Disk))
	m.sharedBlocks.Add(float64(d.SharedBlocks))
}

func (m *Metrics) observeHeld() { m.held.Inc() }

func (m *Metrics) observeAdmission(d admission.Decision) {
	m.decisions.WithLabelValues(d.Kind.String()).Inc()
	if d.Reason == admission.ReasonProbe {
		m.probes.Inc()
	}
}

func (m *Metrics) observeTick(waiting int) { m.waiting.Set(float64(waiting)) }

func (m *Metrics) observeEngineUsage(w flashindex.Worker, tokens int64) {
	m.engineUsed.WithLabelValues(workerLabel(w)).Set(float64(max(tokens, 0)))
}

func (m *Metrics) observeEvent(w flashindex.Worker, err error) {
	result := "applied"
	if err != nil {
		result = rejectReason(err)
	}
	m.events.WithLabelValues(workerLabel(w), result).Inc()
}

func (m *Metrics) observeGap(w flashindex.Worker) { m.gaps.WithLabelValues(workerLabel(w)).Inc() }

func (m *Metrics) observeFinished(failed bool) {
	if failed {
		m.finished.WithLabelValues("failed").Inc()
	} else {
		m.finished.WithLabelValues("ok").Inc()
	}
}

func workerLabel(w flashindex.Worker) string {
	return strconv.FormatUint(w.ID, 10) + "/" + strconv.FormatUint(uint64(w.DPRank), 10)
}

// rejectReason names an index error with a bounded label value.
func rejectReason(err error) string {
	var bs *flashindex.BlockSizeError
	var cp *flashindex.CapacityError
	var hc *flashindex.HashConflictError
	var up *flashindex.UnknownParentError
	switch {
	case errors.As(err, &up):
		return "unknown_parent"
	case errors.As(err, &bs):
		return "block_size"
	case errors.As(err, &cp):
		return "capacity"
	case errors.As(err, &hc):
		return "hash_conflict"
	}
	return "rejected"
}
