package eventplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/sharedpool"
)

// WorkerInfo is a worker's presence record: what a replica needs to route
// to it. Relays keep it alive in the workers bucket; a worker whose record
// expires or is deleted is removed from every replica.
type WorkerInfo struct {
	ID               uint64 `json:"id"`
	DPRanks          int    `json:"dp_ranks,omitempty"`
	BlockSize        int    `json:"block_size"`
	KVCapacityTokens int    `json:"kv_capacity_tokens,omitempty"`
	URL              string `json:"url,omitempty"`
}

// PublisherConfig configures a Publisher. Zero fields mean the documented
// defaults.
type PublisherConfig struct {
	// Worker is the engine whose events this relay publishes; its
	// BlockSize is required unless the relay publishes only shared-pool
	// batches: a Worker with BlockSize 0 makes such a pool-only Publisher
	// (Apply fails with ErrPoolOnly, and it announces no worker).
	Worker WorkerInfo
	// PoolLayout is the layout of the shared pool whose batches ApplyPool
	// publishes (how SGLang writes a page into Mooncake); every pool
	// message carries it, so every replica reads the object keys alike.
	// The zero Layout sends none: replicas then need theirs from
	// elsewhere (sharedpool.Pool.SetLayout).
	PoolLayout sharedpool.Layout
	// MaxPendingPool bounds the shared-pool batches buffered while NATS is
	// unreachable or behind (default 65536). Beyond it they are dropped:
	// the next batch's sequence number shows the gap and replicas clear
	// the pool.
	MaxPendingPool int
	// MaxPending bounds the events buffered per DP rank while NATS is
	// unreachable (default 1<<20). Beyond it the buffer is dropped and the
	// rank's next message starts with a Cleared event, so replicas
	// under-report rather than keep blocks the engine may have evicted.
	MaxPending int
	// MaxBatch bounds the events in one message (default 4096, about
	// 75 KB).
	MaxBatch int
	// Announce keeps the worker's presence record alive (default true
	// through Start; set NoAnnounce to publish events only).
	NoAnnounce bool
}

// PublisherStats are a Publisher's counters.
type PublisherStats struct {
	Events      uint64 // events accepted by Apply
	Published   uint64 // events stored in the stream
	Messages    uint64 // messages stored
	Duplicates  uint64 // messages the stream had already (a retried publish)
	Retries     uint64 // failed publish attempts (retried)
	Dropped     uint64 // events dropped on buffer overflow (KV events, and pool batches' events)
	PoolBatches uint64 // shared-pool batches stored
	Conflicts   uint64 // another writer published on a rank's subject
	Pending     int    // events buffered now
}

// Publisher is the relay's half of the event plane: it takes a worker's
// normalised KV events (it is a vllm.EventSink) and shared-pool batches
// and publishes them to the stream, one subject per worker rank, in order,
// exactly once: every message carries a Nats-Msg-Id (the stream drops a
// retried copy) and the subject sequence it expects to follow (a second
// writer for the same rank is detected, not interleaved). Event ids are
// stamped by the Publisher, consecutive per rank across relay restarts: a
// restarted relay continues after the last stored id and first publishes a
// Cleared event, since it cannot know what it missed.
//
// A Publisher is safe for concurrent use; Apply never blocks on NATS.
type Publisher struct {
	p    *Plane
	cfg  PublisherConfig
	wake chan struct{}

	mu     sync.Mutex // guards ranks, pools, st, closed
	ranks  map[uint32]*rankState
	pools  []poolMsg
	st     PublisherStats
	closed bool
	idle   *sync.Cond // signalled when nothing is pending

	hashers map[string]*flashindex.Hasher // used under mu
	nonce   string                        // this process's pool message ids when batches carry no time

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type rankState struct {
	pending   []flashindex.Event
	nextID    uint64
	lastSeq   uint64 // stream sequence of the last message on the subject
	resumed   bool   // nextID and lastSeq were read from the stream
	needClear bool   // the next message starts with a Cleared event
	inflight  int    // events taken by the flusher and not yet stored
}

type poolMsg struct {
	pool   string
	data   []byte
	id     string
	events int
}

// ErrPoolOnly is what Apply returns on a pool-only Publisher.
var ErrPoolOnly = errors.New("eventplane: pool-only relay: no worker to publish KV events of")

// NewPublisher validates cfg.
func NewPublisher(p *Plane, cfg PublisherConfig) (*Publisher, error) {
	if cfg.Worker.BlockSize < 0 || cfg.Worker.BlockSize > flashindex.MaxBlockSize {
		return nil, fmt.Errorf("%w: Worker.BlockSize %d", ErrConfig, cfg.Worker.BlockSize)
	}
	if cfg.Worker.BlockSize == 0 {
		cfg.NoAnnounce = true // pool only: there is no worker to announce
	}
	if cfg.PoolLayout != (sharedpool.Layout{}) {
		if err := cfg.PoolLayout.Validate(); err != nil {
			return nil, fmt.Errorf("%w: PoolLayout: %w", ErrConfig, err)
		}
	}
	if cfg.MaxPending < 0 || cfg.MaxBatch < 0 || cfg.MaxPendingPool < 0 {
		return nil, fmt.Errorf("%w: negative MaxPending, MaxBatch or MaxPendingPool", ErrConfig)
	}
	if cfg.MaxPendingPool == 0 {
		cfg.MaxPendingPool = 1 << 16
	}
	if cfg.MaxPending == 0 {
		cfg.MaxPending = 1 << 20
	}
	if cfg.MaxBatch == 0 {
		cfg.MaxBatch = 4096
	}
	pb := &Publisher{p: p, cfg: cfg, wake: make(chan struct{}, 1), ranks: map[uint32]*rankState{},
		hashers: map[string]*flashindex.Hasher{}, nonce: strconv.FormatInt(time.Now().UnixNano(), 36)}
	pb.idle = sync.NewCond(&pb.mu)
	return pb, nil
}

// Start starts publishing (and, unless NoAnnounce, the presence
// heartbeat). It returns at once; events applied before NATS is reachable
// are buffered.
func (pb *Publisher) Start(ctx context.Context) {
	ctx, pb.cancel = context.WithCancel(ctx)
	pb.wg.Add(1)
	go pb.run(ctx)
	if !pb.cfg.NoAnnounce {
		pb.wg.Add(1)
		go pb.announce(ctx)
	}
}

// Apply buffers one event for publishing. The event is copied; token ids
// are reduced to local hashes here. Apply never blocks on NATS.
func (pb *Publisher) Apply(ev *flashindex.Event) error {
	if ev == nil {
		return flashindex.ErrNilEvent
	}
	if pb.cfg.Worker.BlockSize == 0 {
		return ErrPoolOnly
	}
	if ev.Worker.ID != pb.cfg.Worker.ID {
		return fmt.Errorf("eventplane: event of worker %v on the relay of worker %d", ev.Worker, pb.cfg.Worker.ID)
	}
	pb.mu.Lock()
	if pb.closed {
		pb.mu.Unlock()
		return ErrClosed
	}
	rs := pb.rank(ev.Worker.DPRank)
	pb.st.Events++
	if len(rs.pending) >= pb.cfg.MaxPending {
		pb.st.Dropped += uint64(len(rs.pending)) + 1
		clear(rs.pending)
		rs.pending = rs.pending[:0]
		rs.needClear = true
		pb.mu.Unlock()
		pb.p.log.Warn("eventplane: relay buffer full; dropped events, replicas will clear the worker", "worker", ev.Worker.String())
		return nil
	}
	rs.pending = append(rs.pending, pb.copyEvent(ev))
	pb.mu.Unlock()
	pb.signal()
	return nil
}

// ApplyPool buffers one shared-pool store batch of the named pool for
// publishing, with PoolLayout. b is encoded before ApplyPool returns, so
// the caller may reuse it. A model has one pool (one Mooncake master);
// several relays may carry the same one: the copies of a batch have the
// same message id (pool, sequence number and time), and the stream keeps
// the first within its duplicate window.
func (pb *Publisher) ApplyPool(pool string, b *sharedpool.Batch) error {
	if b == nil || pool == "" {
		return fmt.Errorf("%w: a pool batch needs a batch and a pool name", ErrConfig)
	}
	data, err := AppendPool(nil, b, pb.cfg.PoolLayout)
	if err != nil {
		return err
	}
	// The batch's time tells a restarted Mooncake master's batch 1 from
	// the one before; without it only this process's nonce can.
	id := "pool." + token(pool) + "." + strconv.FormatUint(b.Seq, 10) + "." + strconv.FormatInt(b.TimestampMillis, 10)
	if b.TimestampMillis == 0 {
		id = "pool." + token(pool) + "." + pb.nonce + "." + strconv.FormatUint(b.Seq, 10)
	}
	pb.mu.Lock()
	if pb.closed {
		pb.mu.Unlock()
		return ErrClosed
	}
	if len(pb.pools) >= pb.cfg.MaxPendingPool {
		for _, pm := range pb.pools {
			pb.st.Dropped += uint64(pm.events)
		}
		pb.pools = nil // a new array: the flusher may be reading the old one
		pb.p.log.Warn("eventplane: relay pool buffer full; dropped batches, replicas will clear the shared pool", "pool", pool)
	}
	pb.pools = append(pb.pools, poolMsg{pool: pool, data: data, id: id, events: len(b.Events)})
	pb.mu.Unlock()
	pb.signal()
	return nil
}

func (pb *Publisher) signal() {
	select {
	case pb.wake <- struct{}{}:
	default:
	}
}

func (pb *Publisher) rank(r uint32) *rankState {
	rs := pb.ranks[r]
	if rs == nil {
		rs = &rankState{nextID: 1}
		pb.ranks[r] = rs
	}
	return rs
}

// copyEvent deep-copies ev, hashing token blocks. Callers hold pb.mu.
func (pb *Publisher) copyEvent(ev *flashindex.Event) flashindex.Event {
	out := *ev
	out.Blocks = nil
	out.Hashes = append([]uint64(nil), ev.Hashes...)
	if len(ev.Blocks) > 0 {
		out.Blocks = make([]flashindex.StoredBlock, len(ev.Blocks))
		h := pb.hashers[ev.LoRA]
		if h == nil {
			h, _ = flashindex.NewHasher(pb.cfg.Worker.BlockSize, ev.LoRA)
			pb.hashers[ev.LoRA] = h
		}
		for i := range ev.Blocks {
			b := &ev.Blocks[i]
			o := flashindex.StoredBlock{EngineHash: b.EngineHash, LocalHash: b.LocalHash, HasLocalHash: b.HasLocalHash}
			if !b.HasLocalHash {
				if local, err := h.LocalHashExtra(b.Tokens, b.ExtraKeys); err == nil && len(b.Tokens) == pb.cfg.Worker.BlockSize {
					o.LocalHash, o.HasLocalHash = local, true
				} else {
					o.Tokens = append([]uint32(nil), b.Tokens...)
				}
			}
			out.Blocks[i] = o
		}
	}
	return out
}

// Flush waits until every event applied so far is stored in the stream,
// or ctx ends.
func (pb *Publisher) Flush(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		pb.mu.Lock()
		pb.idle.Broadcast()
		pb.mu.Unlock()
	})
	defer stop()
	pb.mu.Lock()
	defer pb.mu.Unlock()
	for pb.pendingLocked() > 0 || len(pb.pools) > 0 {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		pb.idle.Wait()
	}
	return nil
}

func (pb *Publisher) pendingLocked() int {
	n := 0
	for _, rs := range pb.ranks {
		n += len(rs.pending) + rs.inflight
	}
	return n
}

// Stats returns the counters.
func (pb *Publisher) Stats() PublisherStats {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	st := pb.st
	st.Pending = pb.pendingLocked()
	return st
}

// Close stops publishing (pending events are dropped; Flush first to keep
// them) and, unless NoAnnounce, deletes the worker's presence record so
// every replica removes the worker.
func (pb *Publisher) Close() error {
	pb.mu.Lock()
	if pb.closed {
		pb.mu.Unlock()
		return nil
	}
	pb.closed = true
	pb.idle.Broadcast()
	pb.mu.Unlock()
	if pb.cancel != nil {
		pb.cancel()
	}
	pb.wg.Wait()
	if !pb.cfg.NoAnnounce {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if kv, err := pb.p.js.KeyValue(ctx, pb.p.names.workers); err == nil {
			_ = kv.Delete(ctx, strconv.FormatUint(pb.cfg.Worker.ID, 10))
		}
	}
	return nil
}

// run is the flusher: it publishes whatever is pending, one message per
// rank batch, retrying with backoff while NATS is unreachable.
func (pb *Publisher) run(ctx context.Context) {
	defer pb.wg.Done()
	if pb.p.ensureLoop(ctx) != nil {
		return
	}
	backoff := 50 * time.Millisecond
	var buf []byte
	for {
		progress, err := pb.flushOnce(ctx, &buf)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			pb.mu.Lock()
			pb.st.Retries++
			pb.mu.Unlock()
			pb.p.log.Debug("eventplane: publish failed; retrying", "err", err, "in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 50 * time.Millisecond
		if progress {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-pb.wake:
		}
	}
}

// flushOnce publishes at most one message per rank and the pending pool
// batches. progress reports whether anything was stored.
func (pb *Publisher) flushOnce(ctx context.Context, buf *[]byte) (progress bool, err error) {
	pb.mu.Lock()
	ranks := make([]uint32, 0, len(pb.ranks))
	for r, rs := range pb.ranks {
		if len(rs.pending) > 0 || rs.needClear && rs.resumed {
			ranks = append(ranks, r)
		}
	}
	pools := pb.pools
	pb.mu.Unlock()

	if len(pools) > 0 {
		n, err := pb.publishPools(ctx, pools)
		progress = n > 0
		if err != nil {
			return progress, err
		}
	}
	// Ranks are independent subjects: publish them concurrently (each
	// waits for its own acknowledgement).
	if len(ranks) == 1 {
		ok, err := pb.flushRank(ctx, ranks[0], buf)
		return progress || ok, err
	}
	type result struct {
		ok  bool
		err error
	}
	res := make([]result, len(ranks))
	var wg sync.WaitGroup
	for i, r := range ranks {
		wg.Go(func() {
			var b []byte
			res[i].ok, res[i].err = pb.flushRank(ctx, r, &b)
		})
	}
	wg.Wait()
	for _, x := range res {
		progress = progress || x.ok
		if err == nil {
			err = x.err
		}
	}
	return progress, err
}

// poolWindow bounds the shared-pool messages in flight at once.
const poolWindow = 256

// publishPools publishes pool messages in order, up to poolWindow in
// flight (one connection: the server stores them in the order sent), and
// returns how many were stored. On an error it stops at the first message
// not acknowledged; the caller retries from there, and the stream drops
// any later one it had already stored (same message id), so the order
// holds. No client-side retries: they could reorder.
func (pb *Publisher) publishPools(ctx context.Context, pools []poolMsg) (int, error) {
	done := 0
	futs := make([]jetstream.PubAckFuture, 0, poolWindow)
	for done < len(pools) {
		futs = futs[:0]
		var sendErr error
		for _, pm := range pools[done:min(done+poolWindow, len(pools))] {
			f, err := pb.p.js.PublishAsync(pb.p.names.poolSubject(pm.pool), pm.data, jetstream.WithMsgID(pm.id),
				jetstream.WithRetryAttempts(0))
			if err != nil {
				sendErr = err
				break
			}
			futs = append(futs, f)
		}
		timeout := time.NewTimer(5 * time.Second)
		for i, f := range futs {
			var ack *jetstream.PubAck
			select {
			case ack = <-f.Ok():
			case err := <-f.Err():
				timeout.Stop()
				return done, err
			case <-timeout.C:
				return done, fmt.Errorf("eventplane: pool publish: no acknowledgement in 5 s")
			case <-ctx.Done():
				timeout.Stop()
				return done, ctx.Err()
			}
			pm := &pools[done]
			pb.mu.Lock()
			if len(pb.pools) > 0 && pb.pools[0].id == pm.id {
				pb.pools = pb.pools[1:] // (unless an overflow dropped it meanwhile)
			}
			pb.st.Messages++
			pb.st.PoolBatches++
			if ack.Duplicate {
				pb.st.Duplicates++
			}
			if i == len(futs)-1 {
				pb.idle.Broadcast()
			}
			pb.mu.Unlock()
			done++
		}
		timeout.Stop()
		if sendErr != nil {
			return done, sendErr
		}
	}
	return done, nil
}

func (pb *Publisher) flushRank(ctx context.Context, r uint32, buf *[]byte) (bool, error) {
	w := flashindex.Worker{ID: pb.cfg.Worker.ID, DPRank: r}
	subject := pb.p.names.kvSubject(w)
	pb.mu.Lock()
	rs := pb.ranks[r]
	resumed := rs.resumed
	pb.mu.Unlock()
	if !resumed {
		if err := pb.resume(ctx, r, subject); err != nil {
			return false, err
		}
	}

	pb.mu.Lock()
	var evs []flashindex.Event
	if rs.needClear {
		evs = append(evs, flashindex.Event{Worker: w, Kind: flashindex.Cleared})
	}
	n := min(len(rs.pending), pb.cfg.MaxBatch-len(evs))
	evs = append(evs, rs.pending[:n]...)
	for i := range evs {
		evs[i].EventID = rs.nextID + uint64(i)
	}
	rs.inflight = n
	first, last := rs.nextID, rs.lastSeq
	pb.mu.Unlock()
	if len(evs) == 0 {
		return false, nil
	}

	var err error
	*buf, err = AppendKV((*buf)[:0], w, evs, nil)
	if err != nil {
		return false, err
	}
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	msgID := strconv.FormatUint(w.ID, 10) + "." + strconv.FormatUint(uint64(r), 10) + "." + strconv.FormatUint(first, 10)
	ack, err := pb.p.js.Publish(c, subject, *buf, jetstream.WithMsgID(msgID), jetstream.WithExpectLastSequencePerSubject(last))
	cancel()
	pb.mu.Lock()
	defer pb.mu.Unlock()
	rs.inflight = 0
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
			// Someone else wrote this rank's subject: re-read where it is
			// and start over with a Cleared event.
			pb.st.Conflicts++
			rs.resumed = false
			pb.p.log.Error("eventplane: another relay publishes this worker rank; resynchronising", "worker", w.String())
		}
		return false, err
	}
	if !ack.Duplicate || ack.Sequence > rs.lastSeq {
		rs.lastSeq = ack.Sequence
	}
	if ack.Duplicate {
		pb.st.Duplicates++
	}
	rs.needClear = false
	rs.nextID += uint64(len(evs))
	clear(rs.pending[:n])
	rs.pending = rs.pending[n:]
	if len(rs.pending) == 0 {
		rs.pending = nil
	}
	pb.st.Messages++
	pb.st.Published += uint64(len(evs))
	if pb.pendingLocked() == 0 && len(pb.pools) == 0 {
		pb.idle.Broadcast()
	}
	return true, nil
}

// resume reads the last message on the rank's subject: numbering continues
// after it, behind a Cleared event.
func (pb *Publisher) resume(ctx context.Context, r uint32, subject string) error {
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := pb.p.js.Stream(c, pb.p.names.stream)
	if err != nil {
		return err
	}
	msg, err := st.GetLastMsgForSubject(c, subject)
	var next, seq uint64 = 1, 0
	clearFirst := false
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return err
	default:
		var b KVBatch
		if derr := DecodeKV(msg.Data, &b); derr != nil || len(b.Events) == 0 {
			return fmt.Errorf("eventplane: last message on %s: %v", subject, derr)
		}
		next, seq, clearFirst = b.Events[len(b.Events)-1].EventID+1, msg.Sequence, true
	}
	pb.mu.Lock()
	rs := pb.ranks[r]
	rs.nextID, rs.lastSeq, rs.resumed = next, seq, true
	rs.needClear = rs.needClear || clearFirst
	pb.mu.Unlock()
	return nil
}

// announce keeps the worker's presence record alive.
func (pb *Publisher) announce(ctx context.Context) {
	defer pb.wg.Done()
	if pb.p.ensureLoop(ctx) != nil {
		return
	}
	val, _ := json.Marshal(pb.cfg.Worker)
	key := strconv.FormatUint(pb.cfg.Worker.ID, 10)
	every := pb.p.cfg.WorkerTTL / 3
	for {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		kv, err := pb.p.js.KeyValue(c, pb.p.names.workers)
		if err == nil {
			_, err = kv.Put(c, key, val)
		}
		cancel()
		if err != nil && ctx.Err() == nil {
			pb.p.log.Debug("eventplane: presence heartbeat failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}
