package mock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agentkv/agentkv/engine/sim"
	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/flashindex"
)

// job is one request in the simulated engine. The driver goroutine writes
// its progress under driver.mu and signals notify; the HTTP handler reads
// it with progress.
type job struct {
	req    sim.Request
	tokens []uint32 // prompt then generated tokens; read-only
	prompt int      // prompt tokens
	notify chan struct{}

	// guarded by driver.mu
	generated int
	done      bool
	err       error
}

// progress returns the tokens generated so far, whether the job has
// finished, its error, and its cached prompt tokens.
func (d *driver) progress(j *job) (gen int, done bool, cached int, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return j.generated, j.done, j.req.CachedTokens + j.req.HostCachedTokens, j.err
}

// blockInfo is what the driver knows of one engine block (by sequence
// hash): its tokens, the live jobs whose sequence holds it, and the tiers
// it is stored on. It is dropped when no job holds it and no tier does.
type blockInfo struct {
	tokens []uint32 // BlockSize tokens; a sub-slice of a job's tokens
	salt   string   // the cache salt mixed into a sequence's first block ("" otherwise)
	jobs   int
	tiers  uint8 // bit per flashindex.Tier
}

// driver runs a sim.Engine in real time: one goroutine steps it, sleeping
// each step's modelled duration divided by the speed-up, publishes the
// step's KV events as one batch, and hands the tokens each step sampled to
// the jobs' handlers.
type driver struct {
	speedup float64
	hasher  *flashindex.Hasher
	pub     *publisher // nil: no events
	medium  [4]string  // medium per tier

	wake chan struct{}

	mu       sync.Mutex // guards everything below
	eng      *sim.Engine
	simCfg   sim.Config
	pending  []*job
	active   []*job
	blocks   map[uint64]*blockInfo
	dropped  []uint64 // blocks to forget at the end of the step (sweep)
	batch    []vllm.WireEvent
	nextID   uint64
	vnow     time.Duration // virtual time
	anchorW  time.Time     // wall time of anchorV
	anchorV  time.Duration
	idle     bool
	restarts int
	stall    time.Time // no step starts before this wall time
	paused   bool      // no step runs and no request is admitted (control.go)
	stats    driverStats
	sinkErr  error
}

type driverStats struct {
	requests, finished, rejected   int64
	promptTokens, generationTokens int64
	cachedTokens                   int64
	steps                          int64
}

func newDriver(cfg sim.Config, speedup float64, pub *publisher) (*driver, error) {
	d := &driver{speedup: speedup, pub: pub, wake: make(chan struct{}, 1), blocks: map[uint64]*blockInfo{}, anchorW: time.Now(), idle: true,
		medium: [4]string{flashindex.Device: "GPU", flashindex.Host: "CPU_PINNED", flashindex.Disk: "DISK", flashindex.External: "EXTERNAL"}}
	if err := d.reset(cfg); err != nil {
		return nil, err
	}
	h, err := flashindex.NewHasher(d.simCfg.BlockSize, "")
	if err != nil {
		return nil, fmt.Errorf("mock: %w", err)
	}
	d.hasher = h
	return d, nil
}

// reset replaces the engine with an empty one (under mu, or before the
// loop starts).
func (d *driver) reset(cfg sim.Config) error {
	eng, err := sim.New(cfg, sim.EventSinkFunc(d.apply))
	if err != nil {
		return fmt.Errorf("mock: %w", err)
	}
	d.eng, d.simCfg = eng, eng.Config()
	return nil
}

// apply is the engine's event sink (called by Step, under mu): it records
// the blocks' tiers and turns the event into a wire event of this step's
// batch.
func (d *driver) apply(ev *flashindex.Event) error {
	bs := d.simCfg.BlockSize
	bit := uint8(1) << ev.Tier
	switch ev.Kind {
	case flashindex.Stored:
		w := vllm.WireEvent{Kind: flashindex.Stored, Parent: ev.Parent, HasParent: ev.HasParent, BlockSize: bs, Medium: d.medium[ev.Tier]}
		for _, b := range ev.Blocks {
			info := d.blocks[b.EngineHash]
			if info == nil {
				// Cannot happen: every block of a live job is known.
				return fmt.Errorf("mock: stored block %x has no tokens", b.EngineHash)
			}
			info.tiers |= bit
			if info.salt != "" {
				// vLLM publishes a request's cache_salt as its first
				// block's extra key.
				if w.ExtraKeys == nil {
					w.ExtraKeys = make([][]string, len(w.Hashes), len(ev.Blocks))
				}
				w.ExtraKeys = append(w.ExtraKeys, []string{info.salt})
			} else if w.ExtraKeys != nil {
				w.ExtraKeys = append(w.ExtraKeys, nil)
			}
			w.Hashes = append(w.Hashes, b.EngineHash)
			w.Tokens = append(w.Tokens, info.tokens...)
		}
		d.batch = append(d.batch, w)
	case flashindex.Removed:
		w := vllm.WireEvent{Kind: flashindex.Removed, Medium: d.medium[ev.Tier], Hashes: append([]uint64(nil), ev.Hashes...)}
		for _, h := range ev.Hashes {
			if info := d.blocks[h]; info != nil {
				info.tiers &^= bit
				d.drop(h, info)
			}
		}
		d.batch = append(d.batch, w)
	case flashindex.Cleared:
		d.batch = append(d.batch, vllm.WireEvent{Kind: flashindex.Cleared})
	}
	return nil
}

// drop marks a block that may be forgotten; sweep forgets it at the end
// of the step unless a tier or a job took it again meanwhile (an evicted
// device block is Removed before it is Stored on the host).
func (d *driver) drop(h uint64, info *blockInfo) {
	if info.jobs == 0 && info.tiers == 0 {
		d.dropped = append(d.dropped, h)
	}
}

// sweep forgets the dropped blocks no tier and no job holds (under mu).
func (d *driver) sweep() {
	for _, h := range d.dropped {
		if info := d.blocks[h]; info != nil && info.jobs == 0 && info.tiers == 0 {
			delete(d.blocks, h)
		}
	}
	d.dropped = d.dropped[:0]
}

// submit queues a request of prompt tokens followed by out generated
// tokens (tokens holds both). It returns ErrTooLong when the sequence can
// never fit the engine.
func (d *driver) submit(tokens []uint32, prompt int, salt string) (*job, error) {
	out := len(tokens) - prompt
	bs := d.simCfg.BlockSize
	full := (len(tokens) - 1) / bs
	if out < 1 {
		full = prompt / bs
	}
	local, seq := d.hasher.Salted(salt).AppendHashes(nil, nil, tokens[:full*bs], 0, false)
	j := &job{tokens: tokens, prompt: prompt, notify: make(chan struct{}, 1)}
	j.req = sim.Request{InputTokens: prompt, OutputTokens: out, LocalHashes: local, SeqHashes: seq, Worker: -1}
	d.mu.Lock()
	if need := (len(tokens) - 1 + bs) / bs; need > d.simCfg.DeviceBlocks {
		d.mu.Unlock()
		return nil, fmt.Errorf("%w: %d tokens need %d blocks, the KV cache has %d", ErrTooLong, len(tokens), need, d.simCfg.DeviceBlocks)
	}
	d.nextID++
	j.req.ID = d.nextID
	for i, h := range seq {
		info := d.blocks[h]
		if info == nil {
			info = &blockInfo{tokens: tokens[i*bs : (i+1)*bs : (i+1)*bs]}
			if i == 0 {
				info.salt = salt
			}
			d.blocks[h] = info
		}
		info.jobs++
	}
	d.pending = append(d.pending, j)
	d.stats.requests++
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
	return j, nil
}

// release drops a finished job's hold on its blocks (under mu).
func (d *driver) release(j *job) {
	for _, h := range j.req.SeqHashes {
		if info := d.blocks[h]; info != nil {
			info.jobs--
			d.drop(h, info)
		}
	}
}

// finish ends a job (under mu).
func (d *driver) finish(j *job, err error) {
	j.done, j.err = true, err
	d.release(j)
	select {
	case j.notify <- struct{}{}:
	default:
	}
}

// run steps the engine until ctx is done.
func (d *driver) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	sleep := func(until time.Time) bool {
		wait := time.Until(until)
		if wait <= 0 {
			return ctx.Err() == nil
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		d.mu.Lock()
		if st := d.stall; time.Now().Before(st) {
			d.mu.Unlock()
			if !sleep(st) {
				return
			}
			continue
		}
		if d.paused {
			d.idle = true
			d.mu.Unlock()
			select {
			case <-d.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		for _, j := range d.pending {
			if err := d.eng.Add(&j.req); err != nil {
				d.stats.rejected++
				d.finish(j, fmt.Errorf("%w: %v", ErrTooLong, err))
				continue
			}
			d.active = append(d.active, j)
		}
		clear(d.pending)
		d.pending = d.pending[:0]
		if !d.eng.HasWork() {
			d.idle = true
			batch := d.batch // events hints made while idle
			d.batch = nil
			d.mu.Unlock()
			if d.pub != nil && len(batch) > 0 {
				d.pub.publish(batch)
			}
			select {
			case <-d.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		now := time.Now()
		if d.idle {
			// Virtual time passes while idle too.
			d.vnow = d.anchorV + time.Duration(float64(now.Sub(d.anchorW))*d.speedup)
			d.anchorW, d.anchorV, d.idle = now, d.vnow, false
		}
		res, err := d.eng.Step(d.vnow)
		d.sweep()
		d.stats.steps++
		if err != nil {
			d.sinkErr = err
		}
		if res.Duration == 0 {
			res.Duration = time.Millisecond // nothing could run: do not spin
		}
		batch := d.batch
		d.batch = nil
		d.vnow += res.Duration
		target := d.anchorW.Add(time.Duration(float64(d.vnow-d.anchorV) / d.speedup))
		if target.Before(now.Add(-time.Second)) {
			// Far behind (the CPU could not keep up): re-anchor rather
			// than run without pause for long.
			d.anchorW, d.anchorV = now, d.vnow
		}
		d.mu.Unlock()

		if d.pub != nil && len(batch) > 0 {
			d.pub.publish(batch)
		}
		if !sleep(target) {
			return
		}

		d.mu.Lock()
		keep := d.active[:0]
		for _, j := range d.active {
			g := j.req.Generated()
			if g > j.generated {
				d.stats.generationTokens += int64(g - j.generated)
				j.generated = g
				select {
				case j.notify <- struct{}{}:
				default:
				}
			}
			if j.req.Finished > 0 && g >= max(1, j.req.OutputTokens) {
				d.stats.finished++
				d.stats.promptTokens += int64(j.prompt)
				d.stats.cachedTokens += int64(j.req.CachedTokens + j.req.HostCachedTokens)
				d.finish(j, nil)
				continue
			}
			keep = append(keep, j)
		}
		clear(d.active[len(keep):])
		d.active = keep
		d.sweep()
		d.mu.Unlock()
	}
}

// restart replaces the engine with an empty one, as a restarted vLLM:
// every queued and running request fails with ErrRestarted, the event
// sequence starts over and its first batch is AllBlocksCleared.
func (d *driver) restart() error {
	d.mu.Lock()
	for _, j := range d.active {
		d.finish(j, ErrRestarted)
	}
	for _, j := range d.pending {
		d.finish(j, ErrRestarted)
	}
	d.active, d.pending = nil, nil
	err := d.reset(d.simCfg)
	d.batch = nil
	clear(d.blocks)
	d.dropped = d.dropped[:0]
	d.restarts++
	d.mu.Unlock()
	if d.pub != nil {
		d.pub.restart()
		d.pub.publish([]vllm.WireEvent{{Kind: flashindex.Cleared}})
	}
	return err
}

// snapshot returns gauges for /metrics.
type snapshot struct {
	running, waiting int
	usedBlocks       int
	cachedBlocks     int
	stats            driverStats
	simStats         sim.Stats
	cfg              sim.Config
}

func (d *driver) snapshot() snapshot {
	d.mu.Lock()
	defer d.mu.Unlock()
	return snapshot{running: d.eng.Running(), waiting: d.eng.Waiting() + len(d.pending), usedBlocks: d.eng.UsedBlocks(),
		cachedBlocks: d.eng.CachedBlocks(), stats: d.stats, simStats: d.eng.Stats(), cfg: d.simCfg}
}

// setStall makes the loop start no step before until.
func (d *driver) setStall(until time.Time) {
	d.mu.Lock()
	d.stall = until
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// cached returns the sequence hashes cached on tier, for tests.
func (d *driver) cached(tier flashindex.Tier) []uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.eng.Cached(tier)
}
