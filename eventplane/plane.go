package eventplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentkv/agentkv/flashindex"
)

// Defaults for Config's zero fields.
const (
	DefaultPrefix        = "agentkv"
	DefaultSnapshotEvery = time.Minute
	DefaultSessionTTL    = 10 * time.Minute
	DefaultWorkerTTL     = 6 * time.Second
	DefaultDupWindow     = 2 * time.Minute
)

// Sentinel errors.
var (
	// ErrConfig reports an invalid Config field.
	ErrConfig = errors.New("eventplane: invalid config")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("eventplane: closed")
	// ErrDegraded is what Replica.Ready wraps while the replica routes on
	// local state only (NATS unreachable, consumer lost).
	ErrDegraded = errors.New("eventplane: degraded: routing on local state")
	// ErrNoSnapshot means the object store holds no snapshot yet.
	ErrNoSnapshot = errors.New("eventplane: no snapshot stored")
	// ErrNotConnected is what a call made while the NATS connection is
	// not up fails with (the server not started yet, or unreachable).
	ErrNotConnected = errors.New("eventplane: NATS not connected")
)

// Config names the event plane of one model on one NATS system. Zero
// fields mean the documented defaults. Every relay and replica of a model
// must use the same Prefix, Model and SnapshotEvery.
type Config struct {
	// Model names the model served; it scopes the stream, the subjects and
	// the buckets. Required. Characters other than letters, digits, '-'
	// and '_' are written as '_' in NATS names.
	Model string
	// Prefix starts every subject (default "agentkv").
	Prefix string
	// SnapshotEvery is the replicas' snapshot cadence (default 1 minute).
	// The KV stream keeps events for Retention, default four times it: a
	// replica restarting from the newest snapshot always finds the events
	// after it.
	SnapshotEvery time.Duration
	Retention     time.Duration
	// SessionTTL is how long an idle session binding lives (default 10
	// minutes); every turn renews it.
	SessionTTL time.Duration
	// WorkerTTL is how long a worker's presence lives without a relay
	// heartbeat (default 6 s); relays renew it every third of it.
	WorkerTTL time.Duration
	// Replicas is the number of copies NATS keeps of the stream and the
	// buckets (default 1; 3 on a three-server cluster).
	Replicas int
	// Memory keeps the stream in memory instead of on disk (tests,
	// benchmarks).
	Memory bool
	// Logger receives connection and stream warnings; nil discards.
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Model == "" {
		return c, fmt.Errorf("%w: Model is required", ErrConfig)
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(c.Prefix, " \t*>") {
		return c, fmt.Errorf("%w: Prefix %q", ErrConfig, c.Prefix)
	}
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = DefaultSnapshotEvery
	}
	if c.SnapshotEvery < 0 || c.Retention < 0 || c.SessionTTL < 0 || c.WorkerTTL < 0 || c.Replicas < 0 {
		return c, fmt.Errorf("%w: negative duration or replica count", ErrConfig)
	}
	if c.Retention == 0 {
		c.Retention = 4 * c.SnapshotEvery
	}
	if c.Retention < c.SnapshotEvery {
		return c, fmt.Errorf("%w: Retention %v shorter than SnapshotEvery %v", ErrConfig, c.Retention, c.SnapshotEvery)
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = DefaultSessionTTL
	}
	if c.WorkerTTL == 0 {
		c.WorkerTTL = DefaultWorkerTTL
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// token makes s usable as one NATS subject token and in stream and bucket
// names.
func token(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

// names are the NATS names of one model's plane.
type names struct {
	kvSubjects   string // prefix.kv.model.>
	poolSubjects string // prefix.pool.model.>
	loadSubjects string // prefix.load.model.> (core NATS, not stored)
	kvBase       string // prefix.kv.model.
	poolBase     string
	loadBase     string
	stream       string
	snapshots    string // object store
	sessions     string // KV bucket
	workers      string // KV bucket
	replicas     string // KV bucket
}

func newNames(c Config) names {
	m := token(c.Model)
	p := c.Prefix
	up := strings.ToUpper(token(p))
	return names{
		kvSubjects:   p + ".kv." + m + ".>",
		poolSubjects: p + ".pool." + m + ".>",
		loadSubjects: p + ".load." + m + ".>",
		kvBase:       p + ".kv." + m + ".",
		poolBase:     p + ".pool." + m + ".",
		loadBase:     p + ".load." + m + ".",
		stream:       up + "_EVENTS_" + m,
		snapshots:    token(p) + "_snapshots_" + m,
		sessions:     token(p) + "_sessions_" + m,
		workers:      token(p) + "_workers_" + m,
		replicas:     token(p) + "_replicas_" + m,
	}
}

// KVSubject is the subject of worker rank w's KV events: one subject per
// model and worker rank, so JetStream keeps each rank's events in order
// and a relay can demand that no one else wrote to it.
func (n names) kvSubject(w flashindex.Worker) string {
	return n.kvBase + strconv.FormatUint(w.ID, 10) + "." + strconv.FormatUint(uint64(w.DPRank), 10)
}

func (n names) poolSubject(pool string) string { return n.poolBase + token(pool) }

// Plane is a connection to one model's event plane: the NATS connection,
// its JetStream context, and the stream and buckets, created on first use.
// Relays (Publisher) and replicas (Replica) are built on a Plane.
//
// A Plane is safe for concurrent use. Close closes the NATS connection
// when the Plane opened it.
type Plane struct {
	cfg   Config
	names names
	nc    *nats.Conn
	js    jetstream.JetStream
	owned bool
	log   *slog.Logger
	// waiting is set while a start-up loop has logged that it waits for
	// the connection, so the plane's several loops log it once.
	waiting atomic.Bool
}

// cause names why a call failed. While the connection is not up, every
// publish and request fails with nats.ErrReconnectBufExceeded ("outbound
// buffer limit exceeded", since a disconnected Plane buffers nothing),
// which names the symptom; cause reports ErrNotConnected instead, with the
// connection's status (RECONNECTING while the server is not up).
func (p *Plane) cause(err error) error {
	if err == nil || p.nc.IsConnected() {
		return err
	}
	return fmt.Errorf("%w (%v)", ErrNotConnected, p.nc.Status())
}

// Connect opens a Plane on the NATS server at url. It does not wait for
// the server: the connection retries in the background forever, so a
// replica starts and routes on local state while NATS is down. Callers
// that need the stream now call Ensure.
func Connect(url string, cfg Config, opts ...nats.Option) (*Plane, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	base := []nats.Option{
		nats.Name("agentkv-eventplane"),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectBufSize(-1), // fail fast while disconnected; callers keep their own buffers
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("eventplane: NATS disconnected", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("eventplane: NATS reconnected", "url", nc.ConnectedUrl())
		}),
	}
	nc, err := nats.Connect(url, append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("eventplane: connect %s: %w", url, err)
	}
	p, err := NewPlane(nc, cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	p.owned = true
	return p, nil
}

// NewPlane builds a Plane on an existing connection (not closed by Close).
func NewPlane(nc *nats.Conn, cfg Config) (*Plane, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("eventplane: %w", err)
	}
	return &Plane{cfg: cfg, names: newNames(cfg), nc: nc, js: js, log: cfg.Logger}, nil
}

// Conn returns the NATS connection.
func (p *Plane) Conn() *nats.Conn { return p.nc }

// Connected reports whether the NATS connection is up.
func (p *Plane) Connected() bool { return p.nc.IsConnected() }

// Close closes the connection if Connect opened it.
func (p *Plane) Close() {
	if p.owned {
		p.nc.Close()
	}
}

// Ensure creates or updates the stream and the buckets. It is idempotent
// and safe to call from every relay and replica. While the connection is
// not up it fails with an error that wraps ErrNotConnected.
func (p *Plane) Ensure(ctx context.Context) error { return p.cause(p.ensure(ctx)) }

func (p *Plane) ensure(ctx context.Context) error {
	storage := jetstream.FileStorage
	if p.cfg.Memory {
		storage = jetstream.MemoryStorage
	}
	want := jetstream.StreamConfig{
		Name:        p.names.stream,
		Description: "agentkv KV and shared-pool events of model " + p.cfg.Model,
		Subjects:    []string{p.names.kvSubjects, p.names.poolSubjects},
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      p.cfg.Retention,
		Storage:     storage,
		Replicas:    p.cfg.Replicas,
		Duplicates:  min(DefaultDupWindow, p.cfg.Retention),
		Discard:     jetstream.DiscardOld,
	}
	// Update only what differs: every relay and replica calls Ensure, and
	// a stream update racing consumer creation is needless churn.
	st, err := p.js.Stream(ctx, p.names.stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		_, err = p.js.CreateOrUpdateStream(ctx, want)
	case err == nil:
		have := st.CachedInfo().Config
		if have.MaxAge != want.MaxAge || have.Duplicates != want.Duplicates || have.Replicas != want.Replicas ||
			!slices.Equal(have.Subjects, want.Subjects) {
			_, err = p.js.UpdateStream(ctx, want)
		}
	}
	if err != nil {
		return fmt.Errorf("eventplane: stream %s: %w", p.names.stream, err)
	}
	if _, err := p.js.ObjectStore(ctx, p.names.snapshots); errors.Is(err, jetstream.ErrBucketNotFound) {
		_, err = p.js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      p.names.snapshots,
			Description: "agentkv index snapshots of model " + p.cfg.Model,
			Storage:     storage,
			Replicas:    p.cfg.Replicas,
		})
		if err != nil {
			return fmt.Errorf("eventplane: object store %s: %w", p.names.snapshots, err)
		}
	} else if err != nil {
		return fmt.Errorf("eventplane: object store %s: %w", p.names.snapshots, err)
	}
	kvStorage := storage
	if err := p.ensureKV(ctx, jetstream.KeyValueConfig{
		Bucket:         p.names.sessions,
		Description:    "agentkv session bindings of model " + p.cfg.Model,
		TTL:            p.cfg.SessionTTL,
		History:        1,
		Storage:        kvStorage,
		Replicas:       p.cfg.Replicas,
		LimitMarkerTTL: time.Second,
	}); err != nil {
		return fmt.Errorf("eventplane: bucket %s: %w", p.names.sessions, err)
	}
	if err := p.ensureKV(ctx, jetstream.KeyValueConfig{
		Bucket:         p.names.workers,
		Description:    "agentkv worker presence of model " + p.cfg.Model,
		TTL:            p.cfg.WorkerTTL,
		History:        1,
		Storage:        kvStorage,
		Replicas:       p.cfg.Replicas,
		LimitMarkerTTL: time.Second,
	}); err != nil {
		return fmt.Errorf("eventplane: bucket %s: %w", p.names.workers, err)
	}
	if err := p.ensureKV(ctx, jetstream.KeyValueConfig{
		Bucket:      p.names.replicas,
		Description: "agentkv replica presence of model " + p.cfg.Model,
		TTL:         p.cfg.WorkerTTL,
		History:     1,
		Storage:     kvStorage,
		Replicas:    p.cfg.Replicas,
	}); err != nil {
		return fmt.Errorf("eventplane: bucket %s: %w", p.names.replicas, err)
	}
	return nil
}

// ensureKV creates a key-value bucket unless it exists.
func (p *Plane) ensureKV(ctx context.Context, cfg jetstream.KeyValueConfig) error {
	_, err := p.js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		_, err = p.js.CreateOrUpdateKeyValue(ctx, cfg) // another process may create it meanwhile
	}
	return err
}

// ensureLoop calls Ensure until it succeeds or ctx ends.
func (p *Plane) ensureLoop(ctx context.Context) error {
	wait := 100 * time.Millisecond
	for {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := p.ensure(c)
		cancel()
		if err == nil {
			if p.waiting.CompareAndSwap(true, false) {
				p.log.Info("eventplane: NATS connected", "url", p.nc.ConnectedUrl())
			}
			return nil
		}
		if err = p.cause(err); errors.Is(err, ErrNotConnected) {
			// The server is not up yet (a replica embedding it, still
			// starting) or unreachable: one line, not one per loop and try.
			if p.waiting.CompareAndSwap(false, true) {
				p.log.Warn("eventplane: waiting for NATS to connect; retrying in the background", "status", p.nc.Status().String())
			}
		} else {
			p.log.Warn("eventplane: stream not ready; retrying", "err", err, "in", wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}
