package eventplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/sharedpool"
)

// ReplicaConfig configures a Replica. Zero fields mean the documented
// defaults.
type ReplicaConfig struct {
	// Name identifies the replica among the model's replicas: its durable
	// consumer, its load reports and its snapshots are named after it.
	// Required; letters, digits, '-' and '_'.
	Name string
	// Router is the replica's router. Required. Give it
	// Config.IndexSnapshot from LoadSnapshot and set StartSeq to start warm.
	Router *agentkv.Router
	// Pool, if set, receives the shared-pool store events (the same pool
	// the router's Config.SharedPool credits), with the layout the relay
	// sends, and is saved in this replica's snapshots. Restore
	// Snapshot.Pool into it before Start when starting from a snapshot.
	Pool *sharedpool.Pool
	// StartSeq is the first stream sequence to apply: Snapshot.Seq+1 after
	// restoring a snapshot, 0 or 1 for the whole retained stream.
	StartSeq uint64
	// NoSnapshots turns off this replica's periodic snapshots (another
	// replica writes them). Snapshots are written every
	// Config.SnapshotEvery otherwise.
	NoSnapshots bool
	// LoadEvery is the load-report heartbeat (default 1 s); reports are
	// also sent at once on every change. A replica silent for three
	// heartbeats has its load dropped.
	LoadEvery time.Duration
	// NoSharedLoad keeps load local (to measure herding without it).
	NoSharedLoad bool
	// NoBindings makes Route use only the router's local session table.
	NoBindings bool
	// OnWorker is told when a worker's presence record appears (up) or
	// goes (its relay stopped, or its heartbeat expired). nil: a worker
	// that goes is removed from the router (index, load, admission).
	OnWorker func(w WorkerInfo, up bool)
	// BindTimeout bounds one binding lookup or write (default 1 s);
	// past it the request routes on the local table.
	BindTimeout time.Duration
	// URL is where this replica serves (http://host:port), published in
	// its presence record so that other replicas can forward a program's
	// turns to its owner (Owner). Empty: the replica owns programs but
	// cannot be forwarded to.
	URL string
	// Metrics, if set, receives the replica's metrics.
	Metrics *Metrics
}

// ReplicaStats are a Replica's counters.
type ReplicaStats struct {
	Applied      uint64 // last stream sequence applied
	Messages     uint64 // messages applied
	Events       uint64 // KV events applied to the router
	Rejected     uint64 // KV events the index rejected
	PoolBatches  uint64 // shared-pool batches applied
	PoolCleared  uint64 // of them, batches that cleared the pool (sequence gap, clear event, overflow, new layout)
	Duplicates   uint64 // messages at or below Applied (redeliveries)
	Reordered    uint64 // messages held until an earlier one arrived
	Malformed    uint64
	Truncated    uint64 // times the stream no longer held the next event
	Restarts     uint64 // consumer (re)creations
	Snapshots    uint64
	SnapshotSize int
	Pending      uint64 // messages the server has not delivered yet
	// Bindings.
	BindHits, BindCreated, BindMoved, BindConflicts, BindSeeded, BindFallbacks uint64
	// Load sharing.
	LoadSent, LoadReceived uint64
	RemoteReplicas         int
	WorkersGone            uint64
}

// Replica is one router replica on the event plane: it consumes every
// worker's KV events from the stream into its router's index (a durable
// consumer with acknowledgements; redeliveries and duplicates are dropped
// by stream sequence, and relay retries by the index's per-worker event
// ids), writes periodic index snapshots to the object store, shares its
// active load, keeps session bindings authoritative in a KV bucket with
// compare-and-set, and removes workers whose presence record goes.
//
// While NATS is unreachable it keeps routing on what it has (local load,
// local session table), reports degraded through Ready and its metrics,
// and resumes from its last acknowledged sequence on reconnect.
//
// A Replica is safe for concurrent use. Start it once; Close stops it.
type Replica struct {
	p   *Plane
	cfg ReplicaConfig
	r   *agentkv.Router
	log interface {
		Warn(string, ...any)
		Info(string, ...any)
		Debug(string, ...any)
	}

	mu       sync.Mutex // guards the apply state below and st
	applied  uint64
	stash    map[uint64]jetstream.Msg // out-of-order messages, by stream sequence
	gapSince time.Time
	batch    KVBatch
	pbatch   PoolBatch
	st       ReplicaStats
	consErr  error
	restart  chan struct{}
	// streamCreated is when the stream we consume was created; another
	// time means it was recreated under us.
	streamCreated time.Time

	lastMsg   atomic.Int64 // unix nanos of the last consumer activity
	announced atomic.Bool  // the presence record was written once

	testApplied chan uint64 // tests and benchmarks: each applied sequence (non-blocking send)

	load *loadShare
	bind *bindings

	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
}

// NewReplica validates cfg.
func NewReplica(p *Plane, cfg ReplicaConfig) (*Replica, error) {
	if cfg.Name == "" || token(cfg.Name) != cfg.Name {
		return nil, fmt.Errorf("%w: replica Name %q (letters, digits, '-', '_')", ErrConfig, cfg.Name)
	}
	if cfg.Router == nil {
		return nil, fmt.Errorf("%w: Router is required", ErrConfig)
	}
	if cfg.LoadEvery < 0 || cfg.BindTimeout < 0 {
		return nil, fmt.Errorf("%w: negative duration", ErrConfig)
	}
	if cfg.LoadEvery == 0 {
		cfg.LoadEvery = time.Second
	}
	if cfg.BindTimeout == 0 {
		cfg.BindTimeout = time.Second
	}
	rp := &Replica{p: p, cfg: cfg, r: cfg.Router, log: p.log, stash: map[uint64]jetstream.Msg{},
		restart: make(chan struct{}, 1)}
	if cfg.StartSeq > 0 {
		rp.applied = cfg.StartSeq - 1
	}
	rp.st.Applied = rp.applied
	rp.load = newLoadShare(rp)
	rp.bind = newBindings(rp)
	if cfg.Metrics != nil {
		// A warm start has applied what its snapshot covers: the gauge
		// says so before any new event (else it reads 0 until one comes).
		cfg.Metrics.applied.Set(float64(rp.applied))
		cfg.Metrics.rp.Store(rp) // last: a scrape may read the replica at once
	}
	return rp, nil
}

// Start starts consuming, snapshotting, load sharing and the presence
// watch. It returns at once; with NATS down the loops retry in the
// background.
func (rp *Replica) Start(ctx context.Context) {
	ctx, rp.cancel = context.WithCancel(ctx)
	rp.lastMsg.Store(time.Now().UnixNano())
	rp.wg.Add(3)
	go rp.consume(ctx)
	go rp.watchWorkers(ctx)
	go rp.announceReplica(ctx)
	if !rp.cfg.NoSnapshots && rp.p.cfg.SnapshotEvery > 0 {
		rp.wg.Add(1)
		go rp.snapshotLoop(ctx)
	}
	if !rp.cfg.NoSharedLoad {
		rp.load.start(ctx)
	}
}

// Close stops every loop and waits for them. It does not delete the
// durable consumer, so a replica restarted under the same name could
// resume from it (Start recreates it at StartSeq).
func (rp *Replica) Close() error {
	if rp.closed.Swap(true) {
		return nil
	}
	if rp.cancel != nil {
		rp.cancel()
	}
	rp.wg.Wait()
	rp.load.stop()
	return nil
}

// Stats returns the counters.
func (rp *Replica) Stats() ReplicaStats {
	rp.mu.Lock()
	st := rp.st
	rp.mu.Unlock()
	rp.load.stats(&st)
	rp.bind.stats(&st)
	return st
}

// Applied returns the last stream sequence applied.
func (rp *Replica) Applied() uint64 {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return rp.applied
}

// Ready returns nil while the replica is in sync with the event plane, or
// an error wrapping ErrDegraded that says why it routes on local state
// only. Serve it from /readyz: a degraded replica still routes, so a load
// balancer may keep it in rotation; the body says what is missing.
func (rp *Replica) Ready() error {
	if !rp.p.Connected() {
		return fmt.Errorf("%w: NATS %s", ErrDegraded, rp.p.nc.Status())
	}
	rp.mu.Lock()
	err := rp.consErr
	rp.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%w: consumer: %v", ErrDegraded, err)
	}
	return nil
}

func (rp *Replica) consumerName() string { return "replica_" + rp.cfg.Name }

// consume runs the durable consumer, recreating it when it is lost or
// when the apply loop asks (a gap that redelivery did not fill).
func (rp *Replica) consume(ctx context.Context) {
	defer rp.wg.Done()
	if rp.p.ensureLoop(ctx) != nil {
		return
	}
	wait := 100 * time.Millisecond
	for ctx.Err() == nil {
		cc, err := rp.startConsumer(ctx)
		if err != nil {
			err = rp.p.cause(err)
			rp.setConsErr(err)
			rp.log.Warn("eventplane: consumer not started; retrying", "err", err, "in", wait)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait = min(2*wait, 2*time.Second)
			if !rp.p.Connected() {
				continue
			}
			_ = rp.p.ensureLoop(ctx)
			continue
		}
		wait = 100 * time.Millisecond
		rp.setConsErr(nil)
		rp.mu.Lock()
		rp.st.Restarts++
		rp.mu.Unlock()
		tick := time.NewTicker(250 * time.Millisecond)
		ticks := 0
	watch:
		for {
			select {
			case <-ctx.Done():
				tick.Stop()
				cc.Stop()
				return
			case <-rp.restart:
				break watch
			case <-cc.Closed():
				break watch
			case <-tick.C:
				rp.checkGap(ctx)
				if ticks++; ticks%8 == 0 && rp.p.Connected() && rp.checkConsumer(ctx) {
					break watch
				}
			}
		}
		tick.Stop()
		cc.Stop()
	}
}

// startConsumer (re)creates the durable consumer at applied+1.
func (rp *Replica) startConsumer(ctx context.Context) (jetstream.ConsumeContext, error) {
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := rp.p.js.Stream(c, rp.p.names.stream)
	if err != nil {
		return nil, err
	}
	info := st.CachedInfo()
	rp.mu.Lock()
	known := rp.streamCreated
	rp.streamCreated = info.Created
	rp.mu.Unlock()
	if !known.IsZero() && !known.Equal(info.Created) || info.State.LastSeq < rp.Applied() {
		// The stream was recreated: the server lost its store (memory
		// storage, a wiped volume). Nothing we hold can be matched to it
		// any more; all it holds is new.
		rp.reset(max(info.State.FirstSeq, 1) - 1)
	}
	rp.mu.Lock()
	start := rp.applied + 1
	clear(rp.stash)
	rp.gapSince = time.Time{}
	rp.mu.Unlock()
	name := rp.consumerName()
	// Always a fresh consumer at applied+1: the first time, an existing
	// durable of this name belongs to an earlier process whose index is
	// gone; later (a gap redelivery did not fill, the consumer lost), a
	// fresh one delivers in order from where we are, where resuming the
	// old one would first wait out the ack wait of whatever its stale pull
	// requests took. A NATS reconnect needs none of this: the running
	// Consume resumes the durable from its last acknowledgement.
	if _, err := st.Consumer(c, name); err == nil {
		_ = st.DeleteConsumer(c, name)
	}
	cons, err := st.CreateOrUpdateConsumer(c, jetstream.ConsumerConfig{
		Durable:           name,
		Description:       "agentkv replica " + rp.cfg.Name,
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       start,
		AckPolicy:         jetstream.AckAllPolicy,
		AckWait:           30 * time.Second, // ≫ the time a pulled batch waits in the client
		MaxAckPending:     1 << 16,
		FilterSubjects:    []string{rp.p.names.kvSubjects, rp.p.names.poolSubjects},
		InactiveThreshold: rp.p.cfg.Retention,
	})
	if err != nil {
		return nil, err
	}
	return cons.Consume(rp.handle,
		jetstream.PullMaxMessages(512),
		jetstream.PullHeartbeat(2*time.Second),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
				rp.setConsErr(err)
				rp.signalRestart()
				return
			}
			rp.log.Debug("eventplane: consumer", "err", err)
		}))
}

func (rp *Replica) setConsErr(err error) {
	rp.mu.Lock()
	rp.consErr = err
	rp.mu.Unlock()
}

func (rp *Replica) signalRestart() {
	select {
	case rp.restart <- struct{}{}:
	default:
	}
}

// handle applies one message in stream order. It runs on the consumer's
// single goroutine.
func (rp *Replica) handle(msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		return
	}
	rp.lastMsg.Store(time.Now().UnixNano())
	s := meta.Sequence.Stream
	rp.mu.Lock()
	rp.st.Pending = meta.NumPending
	switch {
	case s <= rp.applied:
		rp.st.Duplicates++
		rp.mu.Unlock()
		_ = msg.Ack()
		return
	case s > rp.applied+1:
		if _, dup := rp.stash[s]; !dup {
			rp.st.Reordered++
		}
		rp.stash[s] = msg
		if rp.gapSince.IsZero() {
			rp.gapSince = time.Now()
		}
		if len(rp.stash) > 1<<16 {
			clear(rp.stash)
			rp.mu.Unlock()
			rp.signalRestart()
			return
		}
		rp.mu.Unlock()
		return
	}
	rp.applyLocked(msg, s)
	last := msg
	defer rp.notifyApplied()
	for {
		m, ok := rp.stash[rp.applied+1]
		if !ok {
			break
		}
		delete(rp.stash, rp.applied+1)
		rp.applyLocked(m, rp.applied+1)
		last = m
	}
	if len(rp.stash) == 0 {
		rp.gapSince = time.Time{}
	}
	rp.mu.Unlock()
	_ = last.Ack() // AckAll: everything up to it
}

func (rp *Replica) notifyApplied() {
	if rp.testApplied != nil {
		select {
		case rp.testApplied <- rp.Applied():
		default:
		}
	}
}

// applyLocked applies message msg with stream sequence s. Callers hold mu.
func (rp *Replica) applyLocked(msg jetstream.Msg, s uint64) {
	rp.applied = s
	rp.st.Applied = s
	rp.st.Messages++
	subj := msg.Subject()
	data := msg.Data()
	switch {
	case len(subj) > len(rp.p.names.kvBase) && subj[:len(rp.p.names.kvBase)] == rp.p.names.kvBase:
		if err := DecodeKV(data, &rp.batch); err != nil {
			rp.st.Malformed++
			rp.log.Warn("eventplane: dropped malformed KV message", "seq", s, "err", err)
			return
		}
		for i := range rp.batch.Events {
			if err := rp.r.ApplyEvent(&rp.batch.Events[i]); err != nil {
				rp.st.Rejected++
			} else {
				rp.st.Events++
			}
		}
		if rp.cfg.Metrics != nil {
			rp.cfg.Metrics.events.Add(float64(len(rp.batch.Events)))
		}
	default:
		if rp.cfg.Pool == nil {
			return
		}
		if err := DecodePool(data, &rp.pbatch); err != nil {
			rp.st.Malformed++
			rp.log.Warn("eventplane: dropped malformed pool message", "seq", s, "err", err)
			return
		}
		changed := false
		if l := rp.pbatch.Layout; l != (sharedpool.Layout{}) {
			var err error
			if changed, err = rp.cfg.Pool.SetLayout(l); err != nil {
				rp.st.Malformed++
				rp.log.Warn("eventplane: pool message with an invalid layout dropped", "seq", s, "err", err)
				return
			}
		}
		rep := rp.cfg.Pool.Apply(&rp.pbatch.Batch)
		rp.st.PoolBatches++
		if changed || rep.Cleared() {
			rp.st.PoolCleared++
		}
	}
	if rp.cfg.Metrics != nil {
		rp.cfg.Metrics.applied.Set(float64(s))
	}
}

// checkGap resolves a gap that redelivery has not filled within the ack
// wait: if the stream no longer holds the missing messages (retention
// removed them), the replica clears the workers it may now hold stale
// blocks of and continues after the gap; otherwise it recreates the
// consumer at applied+1.
func (rp *Replica) checkGap(ctx context.Context) {
	rp.mu.Lock()
	since, applied := rp.gapSince, rp.applied
	rp.mu.Unlock()
	if since.IsZero() || time.Since(since) < time.Second {
		return
	}
	c, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := rp.p.js.Stream(c, rp.p.names.stream)
	if err != nil {
		return
	}
	first := st.CachedInfo().State.FirstSeq
	if first > applied+1 {
		rp.truncated(applied, first)
	}
	rp.signalRestart()
}

// checkConsumer reports whether the consumer must be recreated: the
// stream was recreated below the applied sequence (the server lost its
// store), or the durable consumer is gone (a server restart without its
// state), which a running Consume may not notice.
func (rp *Replica) checkConsumer(ctx context.Context) bool {
	c, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := rp.p.js.Stream(c, rp.p.names.stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return true
	}
	if err != nil {
		return false
	}
	rp.mu.Lock()
	known := rp.streamCreated
	rp.mu.Unlock()
	if info := st.CachedInfo(); !info.Created.Equal(known) || info.State.LastSeq < rp.Applied() {
		return true
	}
	_, err = st.Consumer(c, rp.consumerName())
	return errors.Is(err, jetstream.ErrConsumerNotFound)
}

// truncated handles events lost to retention: applied+1 .. first-1 are
// gone. Every worker's index entries are dropped (under-report rather than
// keep stale blocks); later events rebuild them.
func (rp *Replica) truncated(applied, first uint64) {
	rp.log.Warn("eventplane: stream no longer holds the next events; clearing the index", "applied", applied, "first", first)
	ix := rp.r.Index()
	if applied > 0 {
		for _, w := range ix.Workers() {
			ix.RemoveWorker(w)
		}
		if rp.cfg.Pool != nil {
			rp.cfg.Pool.Reset() // the lost batches may have removed anything
		}
	}
	rp.mu.Lock()
	rp.applied = first - 1
	rp.st.Applied = rp.applied
	rp.st.Truncated++
	rp.mu.Unlock()
}

// reset drops the whole index and continues after sequence last of a
// stream that was recreated.
func (rp *Replica) reset(last uint64) {
	rp.log.Warn("eventplane: the stream was recreated; clearing the index", "applied", rp.Applied(), "from", last+1)
	ix := rp.r.Index()
	for _, w := range ix.Workers() {
		ix.RemoveWorker(w)
	}
	if rp.cfg.Pool != nil {
		rp.cfg.Pool.Reset()
	}
	rp.mu.Lock()
	rp.applied = last
	rp.st.Applied = last
	rp.st.Truncated++
	rp.mu.Unlock()
}

// WaitApplied waits until the replica applied stream sequence seq, or ctx
// ends.
func (rp *Replica) WaitApplied(ctx context.Context, seq uint64) error {
	for {
		if rp.Applied() >= seq {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// LastSeq returns the stream's last sequence (what a replica in sync has
// applied).
func (p *Plane) LastSeq(ctx context.Context) (uint64, error) {
	st, err := p.js.Stream(ctx, p.names.stream)
	if err != nil {
		return 0, err
	}
	return st.CachedInfo().State.LastSeq, nil
}

// Snapshot is an index snapshot with the stream sequence it covers.
type Snapshot struct {
	Data []byte // flashindex snapshot (zstd)
	// Pool is the shared-pool index (sharedpool snapshot, zstd) at the
	// same sequence; nil when the writer had no pool.
	Pool    []byte
	Seq     uint64 // every event up to this stream sequence is in it
	Replica string // who wrote it
	Taken   time.Time
}

// Snapshot writes the router's index, and the shared pool's if the
// replica has one, to the object store as one object named after the
// replica, with the stream sequence both cover, and returns its size. The
// apply loop pauses while they are serialised (in memory), not while the
// object is uploaded.
func (rp *Replica) Snapshot(ctx context.Context) (int, error) {
	var buf bytes.Buffer
	rp.mu.Lock()
	err := rp.r.Index().Snapshot(&buf)
	indexBytes := buf.Len()
	if err == nil && rp.cfg.Pool != nil {
		err = rp.cfg.Pool.Snapshot(&buf)
	}
	seq := rp.applied
	rp.mu.Unlock()
	if err != nil {
		return 0, err
	}
	obs, err := rp.p.js.ObjectStore(ctx, rp.p.names.snapshots)
	if err != nil {
		return 0, err
	}
	meta := map[string]string{
		"seq":     strconv.FormatUint(seq, 10),
		"replica": rp.cfg.Name,
		"taken":   time.Now().UTC().Format(time.RFC3339Nano),
	}
	if rp.cfg.Pool != nil {
		// The object is the index snapshot, then the pool's.
		meta["index_bytes"] = strconv.Itoa(indexBytes)
	}
	_, err = obs.Put(ctx, jetstream.ObjectMeta{Name: "replica." + rp.cfg.Name, Metadata: meta}, bytes.NewReader(buf.Bytes()))
	if err != nil {
		return 0, err
	}
	rp.mu.Lock()
	rp.st.Snapshots++
	rp.st.SnapshotSize = buf.Len()
	rp.mu.Unlock()
	if rp.cfg.Metrics != nil {
		rp.cfg.Metrics.snapshotBytes.Set(float64(buf.Len()))
	}
	return buf.Len(), nil
}

func (rp *Replica) snapshotLoop(ctx context.Context) {
	defer rp.wg.Done()
	t := time.NewTicker(rp.p.cfg.SnapshotEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c, cancel := context.WithTimeout(ctx, rp.p.cfg.SnapshotEvery)
		if _, err := rp.Snapshot(c); err != nil && ctx.Err() == nil {
			rp.log.Warn("eventplane: snapshot not stored", "err", err)
		}
		cancel()
	}
}

// LoadSnapshot fetches the newest snapshot (highest sequence) from the
// object store. It fails with ErrNoSnapshot when there is none. A snapshot
// older than the stream's retained events (Seq+1 < the stream's first
// sequence) is still returned: the replica then clears and rebuilds what
// it cannot replay (see Replica).
func LoadSnapshot(ctx context.Context, p *Plane) (*Snapshot, error) {
	obs, err := p.js.ObjectStore(ctx, p.names.snapshots)
	if err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, ErrNoSnapshot
		}
		return nil, err
	}
	list, err := obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, ErrNoSnapshot
	}
	if err != nil {
		return nil, err
	}
	var best *jetstream.ObjectInfo
	var bestSeq uint64
	for _, oi := range list {
		s, err := strconv.ParseUint(oi.Metadata["seq"], 10, 64)
		if err != nil || oi.Deleted {
			continue
		}
		if best == nil || s > bestSeq {
			best, bestSeq = oi, s
		}
	}
	if best == nil {
		return nil, ErrNoSnapshot
	}
	data, err := obs.GetBytes(ctx, best.Name)
	if err != nil {
		return nil, err
	}
	taken, _ := time.Parse(time.RFC3339Nano, best.Metadata["taken"])
	snap := &Snapshot{Data: data, Seq: bestSeq, Replica: best.Metadata["replica"], Taken: taken}
	if v, ok := best.Metadata["index_bytes"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > len(data) {
			return nil, fmt.Errorf("eventplane: snapshot %s: index_bytes %q of %d bytes", best.Name, v, len(data))
		}
		snap.Data, snap.Pool = data[:n:n], data[n:]
	}
	return snap, nil
}

// removeWorkerRanks drops every rank of worker id from the index (used
// when a custom OnWorker keeps the worker in the router).
func removeWorkerRanks(ix *flashindex.Index, id uint64) {
	for _, w := range ix.Workers() {
		if w.ID == id {
			ix.RemoveWorker(w)
		}
	}
}
