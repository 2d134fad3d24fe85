package agentkv

import (
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentkv/agentkv/admission"
	"github.com/agentkv/agentkv/flashindex"
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
	waiting      prometheus.Gauge
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
		routed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentkv", Subsystem: "router", Name: "requests_routed_total",
			Help: "Requests routed, by how the worker was chosen.",
		}, []string{"via"}),
		promptTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "agentkv", Subsystem: "router", Name: "prompt_tokens_total",
			Help: "Prompt tokens of routed requests.",
		}),
		cachedTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentkv", Subsystem: "router", Name: "cached_tokens_total",
			Help: "Prompt tokens the chosen worker held, by tier (hit rate = this / prompt_tokens_total).",
		}, []string{"tier"}),
		sharedBlocks: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "agentkv", Subsystem: "router", Name: "shared_pool_credit_blocks_total",
			Help: "Shared-pool blocks credited beyond the chosen worker's own prefix.",
		}),
		held: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "agentkv", Subsystem: "admission", Name: "requests_held_total",
			Help: "Requests held by admission control.",
		}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentkv", Subsystem: "admission", Name: "decisions_total",
			Help: "Admission decisions by kind (admit, queue, hold, pause, mark, resume, ...).",
		}, []string{"kind"}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "agentkv", Subsystem: "admission", Name: "queue_depth",
			Help: "Programs with a held turn (queued or paused) after the last tick.",
		}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentkv", Subsystem: "index", Name: "events_total",
			Help: "KV events per worker by result (applied or the rejection reason).",
		}, []string{"worker", "result"}),
		gaps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentkv", Subsystem: "index", Name: "event_gaps_total",
			Help: "KV event id gaps per worker.",
		}, []string{"worker"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentkv", Subsystem: "router", Name: "requests_finished_total",
			Help: "Requests reported done, by outcome.",
		}, []string{"outcome"}),
		hints: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "agentkv", Subsystem: "hints", Name: "actions_sent_total",
			Help: "KV hint actions delivered to worker sinks.",
		}),
	}
	for _, c := range []prometheus.Collector{m.hints, m.overhead, m.routed, m.promptTokens, m.cachedTokens, m.sharedBlocks,
		m.held, m.decisions, m.waiting, m.events, m.gaps, m.finished} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
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
	m.routed.WithLabelValues(via).Inc()
	m.promptTokens.Add(float64(d.prompt))
	m.cachedTokens.WithLabelValues("device").Add(float64(d.Cached.Device))
	m.cachedTokens.WithLabelValues("host").Add(float64(d.Cached.Host))
	m.cachedTokens.WithLabelValues("disk").Add(float64(d.Cached.Disk))
	m.sharedBlocks.Add(float64(d.SharedBlocks))
}

func (m *Metrics) observeHeld() { m.held.Inc() }

func (m *Metrics) observeAdmission(d admission.Decision) {
	m.decisions.WithLabelValues(d.Kind.String()).Inc()
}

func (m *Metrics) observeTick(waiting int) { m.waiting.Set(float64(waiting)) }

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
