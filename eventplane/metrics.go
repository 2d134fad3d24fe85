package eventplane

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are a replica's Prometheus metrics. Create them with NewMetrics
// and pass them in ReplicaConfig.Metrics; several replicas in one process
// need one Metrics each, on different registries.
type Metrics struct {
	events        prometheus.Counter
	applied       prometheus.Gauge
	snapshotBytes prometheus.Gauge
	poolPages     prometheus.GaugeFunc
	bindFallbacks prometheus.Counter
	connected     prometheus.GaugeFunc
	degraded      prometheus.GaugeFunc
	remoteReqs    prometheus.GaugeFunc
	rp            atomic.Pointer[Replica] // set by NewReplica
}

// NewMetrics creates the metrics and registers them on reg (nil: not
// registered). NewReplica attaches them to its replica.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		events: prometheus.NewCounter(prometheus.CounterOpts{Name: "agentkv_eventplane_events_applied_total",
			Help: "KV events applied from the event plane."}),
		applied: prometheus.NewGauge(prometheus.GaugeOpts{Name: "agentkv_eventplane_applied_sequence",
			Help: "Last stream sequence applied."}),
		snapshotBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "agentkv_eventplane_snapshot_bytes",
			Help: "Size of the last index snapshot written."}),
		bindFallbacks: prometheus.NewCounter(prometheus.CounterOpts{Name: "agentkv_eventplane_binding_fallbacks_total",
			Help: "Requests routed on the local session table because the shared bindings were unreachable."}),
	}
	m.connected = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentkv_eventplane_connected",
		Help: "1 while the NATS connection is up."}, func() float64 {
		if rp := m.rp.Load(); rp != nil && rp.p.Connected() {
			return 1
		}
		return 0
	})
	m.poolPages = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentkv_eventplane_pool_pages",
		Help: "Complete pages in the replica's shared-pool (Mooncake) index."}, func() float64 {
		if rp := m.rp.Load(); rp != nil && rp.cfg.Pool != nil {
			return float64(rp.cfg.Pool.Len())
		}
		return 0
	})
	m.degraded = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentkv_eventplane_degraded",
		Help: "1 while the replica routes on local state only (see /readyz)."}, func() float64 {
		if rp := m.rp.Load(); rp == nil || rp.Ready() != nil {
			return 1
		}
		return 0
	})
	m.remoteReqs = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "agentkv_eventplane_remote_requests",
		Help: "Requests in flight on the other replicas, as they last reported (their load counts in this replica's routing)."}, func() float64 {
		if rp := m.rp.Load(); rp != nil && rp.load != nil {
			return float64(rp.load.remoteRequests())
		}
		return 0
	})
	if reg != nil {
		for _, c := range []prometheus.Collector{m.events, m.applied, m.snapshotBytes, m.poolPages, m.bindFallbacks, m.connected, m.degraded, m.remoteReqs} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
