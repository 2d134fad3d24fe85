package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/kvhint"
)

// act builds an action of kind on blocks for session s.
func act(kind kvhint.Kind, s string, blocks ...uint64) kvhint.Action {
	a := kvhint.Action{Kind: kind, SessionID: s, Target: kvhint.Target{Blocks: blocks}}
	switch kind {
	case kvhint.KindDemote:
		a.Dest = kvhint.TierHost
	case kvhint.KindPrefetch:
		a.Dest = kvhint.TierDevice
	case kvhint.KindPin:
		a.TTL = time.Minute
	case kvhint.KindRetain:
		a.TTL, a.Priority = time.Minute, 50
	}
	return a
}

// send delivers the actions to e in one envelope.
func send(t *testing.T, e *Engine, acts ...kvhint.Action) {
	t.Helper()
	env := &kvhint.Envelope{MessageID: "m", Actions: acts}
	for i := range env.Actions {
		env.Actions[i].ID = fmt.Sprint(i)
	}
	if err := e.Send(t.Context(), env); err != nil {
		t.Fatal(err)
	}
}

// apply runs an idle step at now, which applies the queued hints.
func apply(t *testing.T, e *Engine, now time.Duration) {
	t.Helper()
	if e.HasWork() {
		t.Fatal("apply expects an idle engine")
	}
	res, err := e.Step(now)
	if err != nil || res.Duration != 0 || e.PendingHints() != 0 {
		t.Fatalf("idle step: %v, %v, %d pending", res.Duration, err, e.PendingHints())
	}
}

// freeOrder lists the cached free device blocks in reuse order: the default
// list, then the retain classes from the lowest priority up.
func freeOrder(e *Engine) []uint64 {
	var out []uint64
	for s := e.sent; s < int32(len(e.blocks)); s++ {
		for b := e.blocks[s].next; b != s; b = e.blocks[b].next {
			if e.blocks[b].flags&flagCached != 0 {
				out = append(out, e.blocks[b].hash)
			}
		}
	}
	return out
}

// checkIndex compares the engine's tiers with a naive index of its events.
func checkIndex(t *testing.T, e *Engine, idx *naiveIndex) {
	t.Helper()
	for _, tier := range []flashindex.Tier{flashindex.Device, flashindex.Host} {
		if got, want := e.Cached(tier), idx.hashes(tier); !slices.Equal(got, want) {
			t.Fatalf("%v: engine %x, events %x", tier, got, want)
		}
	}
}

func sorted(h ...uint64) []uint64 { return slices.Sorted(slices.Values(h)) }

// newHintEngine returns an engine whose events feed a naive index and a
// recorder, with request a (blocks 1, 2, 3) already run and cached.
func newHintEngine(t *testing.T, cfg Config) (*Engine, *naiveIndex, *recorder, *Request, time.Duration) {
	t.Helper()
	if cfg.BlockSize == 0 {
		cfg.BlockSize = 4
	}
	idx, rec := newNaiveIndex(t), &recorder{}
	e, err := New(cfg, tee{idx, rec})
	if err != nil {
		t.Fatal(err)
	}
	a := mkReq(t, 1, 4, []uint64{1, 2, 3}, 12, 1)
	if err := e.Add(a); err != nil {
		t.Fatal(err)
	}
	now, _ := drain(t, e, 0)
	return e, idx, rec, a, now
}

func TestHintDemote(t *testing.T) {
	tm := Llama3_8B_A100
	e, idx, rec, a, now := newHintEngine(t, Config{DeviceBlocks: 8, HostBlocks: 8})
	seq := slices.Clone(a.SeqHashes)
	before := len(rec.evs)
	send(t, e, act(kvhint.KindDemote, "s", seq[1], seq[2]))
	apply(t, e, now)
	checkIndex(t, e, idx)
	if got := e.Cached(flashindex.Device); !slices.Equal(got, seq[:1]) {
		t.Fatalf("device %x, want only the head", got)
	}
	if got := e.Cached(flashindex.Host); !slices.Equal(got, sorted(seq[1], seq[2])) {
		t.Fatalf("host %x", got)
	}
	// Tail first, as eviction would: removed from the device, stored on the
	// host under its parent.
	evs := rec.evs[before:]
	want := []struct {
		kind   flashindex.EventKind
		tier   flashindex.Tier
		hash   uint64
		parent uint64
	}{
		{flashindex.Removed, flashindex.Device, seq[2], 0},
		{flashindex.Stored, flashindex.Host, seq[2], seq[1]},
		{flashindex.Removed, flashindex.Device, seq[1], 0},
		{flashindex.Stored, flashindex.Host, seq[1], seq[0]},
	}
	if len(evs) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(evs), len(want), evs)
	}
	for i, w := range want {
		ev := evs[i]
		h := uint64(0)
		if ev.Kind == flashindex.Removed {
			h = ev.Hashes[0]
		} else {
			h = ev.Blocks[0].EngineHash
		}
		if ev.Kind != w.kind || ev.Tier != w.tier || h != w.hash || ev.Parent != w.parent {
			t.Fatalf("event %d: %v %v %x (parent %x), want %+v", i, ev.Kind, ev.Tier, h, ev.Parent, w)
		}
	}
	if got := e.Stats().Hints.Demote; got != (kvhint.Counts{Accepted: 1, Blocks: 2}) {
		t.Fatalf("demote counts %+v", got)
	}
	if e.CachedBlocks() != 1 || e.free != 8 {
		t.Fatalf("cached %d free %d: demoted blocks must be free", e.CachedBlocks(), e.free)
	}
	// The next turn hits the head on the device and the tail on the host,
	// paying the host load.
	c := mkReq(t, 2, 4, []uint64{1, 2, 3, 4}, 16, 1)
	e.Add(c)
	res, err := e.Step(now)
	if err != nil {
		t.Fatal(err)
	}
	if c.CachedTokens != 4 || c.HostCachedTokens != 8 {
		t.Fatalf("cached %d + host %d", c.CachedTokens, c.HostCachedTokens)
	}
	if w := tm.Step(StepWork{Seqs: 1, Tokens: 4, AttnNanos: tm.AttnCost(12, 4), HostTokens: 8}); res.Duration != w {
		t.Fatalf("step %v, want %v", res.Duration, w)
	}
	checkIndex(t, e, idx)
}

func TestHintOutcomes(t *testing.T) {
	type result struct {
		kind kvhint.Kind
		want kvhint.Counts
	}
	cases := []struct {
		name string
		cfg  Config
		// acts builds the actions from a's sequence hashes.
		acts func(seq []uint64) []kvhint.Action
		want result
	}{
		{"demote without host tier", Config{DeviceBlocks: 8}, func(s []uint64) []kvhint.Action {
			return []kvhint.Action{act(kvhint.KindDemote, "s", s...)}
		}, result{kvhint.KindDemote, kvhint.Counts{Rejected: 1}}},
		{"demote to disk", Config{DeviceBlocks: 8, HostBlocks: 4}, func(s []uint64) []kvhint.Action {
			a := act(kvhint.KindDemote, "s", s...)
			a.Dest = kvhint.TierDisk
			return []kvhint.Action{a}
		}, result{kvhint.KindDemote, kvhint.Counts{Rejected: 1}}},
		{"demote unknown blocks", Config{DeviceBlocks: 8, HostBlocks: 4}, func(s []uint64) []kvhint.Action {
			return []kvhint.Action{act(kvhint.KindDemote, "s", 77, 78)}
		}, result{kvhint.KindDemote, kvhint.Counts{Missing: 1}}},
		{"demote with a limit", Config{DeviceBlocks: 8, HostBlocks: 4}, func(s []uint64) []kvhint.Action {
			a := act(kvhint.KindDemote, "s", s...)
			a.Limit = 1
			return []kvhint.Action{a}
		}, result{kvhint.KindDemote, kvhint.Counts{Clipped: 1, Blocks: 1}}},
		{"prefetch without host tier", Config{DeviceBlocks: 8}, func(s []uint64) []kvhint.Action {
			return []kvhint.Action{act(kvhint.KindPrefetch, "s", s...)}
		}, result{kvhint.KindPrefetch, kvhint.Counts{Rejected: 1}}},
		{"prefetch of device blocks", Config{DeviceBlocks: 8, HostBlocks: 4}, func(s []uint64) []kvhint.Action {
			return []kvhint.Action{act(kvhint.KindPrefetch, "s", s...)}
		}, result{kvhint.KindPrefetch, kvhint.Counts{Accepted: 1}}},
		{"prefetch to host", Config{DeviceBlocks: 8, HostBlocks: 4}, func(s []uint64) []kvhint.Action {
			a := act(kvhint.KindPrefetch, "s", s...)
			a.Dest = kvhint.TierHost
			return []kvhint.Action{a}
		}, result{kvhint.KindPrefetch, kvhint.Counts{Rejected: 1}}},
		{"prefetch unknown", Config{DeviceBlocks: 8, HostBlocks: 4}, func(s []uint64) []kvhint.Action {
			return []kvhint.Action{act(kvhint.KindPrefetch, "s", 77)}
		}, result{kvhint.KindPrefetch, kvhint.Counts{Missing: 1}}},
		{"pin", Config{DeviceBlocks: 12}, func(s []uint64) []kvhint.Action {
			return []kvhint.Action{act(kvhint.KindPin, "s", s...)}
		}, result{kvhint.KindPin, kvhint.Counts{Accepted: 1, Blocks: 3}}},
		{"pin over budget", Config{DeviceBlocks: 8, Hints: HintConfig{MaxPinned: 2}}, func(s []uint64) []kvhint.Action {
			return []kvhint.Action{act(kvhint.KindPin, "s", s...)}
		}, result{kvhint.KindPin, kvhint.Counts{Clipped: 1, Blocks: 2}}},
		{"pins disabled", Config{DeviceBlocks: 8, Hints: HintConfig{MaxPinned: -1}}, func(s []uint64) []kvhint.Action {
			return []kvhint.Action{act(kvhint.KindPin, "s", s...)}
		}, result{kvhint.KindPin, kvhint.Counts{Rejected: 1}}},
		{"pin TTL clipped", Config{DeviceBlocks: 8, Hints: HintConfig{Bounds: kvhint.Bounds{MaxTTL: time.Second}}}, func(s []uint64) []kvhint.Action {
			return []kvhint.Action{act(kvhint.KindPin, "s", s[0])}
		}, result{kvhint.KindPin, kvhint.Counts{Clipped: 1, Blocks: 1}}},
		{"retain", Config{DeviceBlocks: 8}, func(s []uint64) []kvhint.Action {
			return []kvhint.Action{act(kvhint.KindRetain, "s", s[0], 77)}
		}, result{kvhint.KindRetain, kvhint.Counts{Accepted: 1, Blocks: 1}}},
		{"release", Config{DeviceBlocks: 8}, func(s []uint64) []kvhint.Action {
			return []kvhint.Action{act(kvhint.KindRelease, "s", s...)}
		}, result{kvhint.KindRelease, kvhint.Counts{Accepted: 1, Blocks: 3}}},
		{"release unknown", Config{DeviceBlocks: 8}, func(s []uint64) []kvhint.Action {
			return []kvhint.Action{act(kvhint.KindRelease, "s", 77)}
		}, result{kvhint.KindRelease, kvhint.Counts{Missing: 1}}},
		{"share without peers", Config{DeviceBlocks: 8}, func(s []uint64) []kvhint.Action {
			a := act(kvhint.KindShare, "s", s...)
			a.Sources = []kvhint.Source{{Worker: kvhint.WorkerID{ID: 9}, Endpoint: "x"}}
			return []kvhint.Action{a}
		}, result{kvhint.KindShare, kvhint.Counts{Rejected: 1}}},
		{"range target", Config{DeviceBlocks: 8}, func(s []uint64) []kvhint.Action {
			return []kvhint.Action{{Kind: kvhint.KindRelease, SessionID: "s", Target: kvhint.Target{Range: kvhint.Range{Unit: kvhint.UnitBlocks, End: 2}}}}
		}, result{kvhint.KindRelease, kvhint.Counts{Rejected: 1}}},
		{"whole session", Config{DeviceBlocks: 8}, func(s []uint64) []kvhint.Action {
			return []kvhint.Action{{Kind: kvhint.KindRelease, SessionID: "s"}}
		}, result{kvhint.KindRelease, kvhint.Counts{Rejected: 1}}},
		{"invalid: no session", Config{DeviceBlocks: 8}, func(s []uint64) []kvhint.Action {
			return []kvhint.Action{act(kvhint.KindRelease, "", s...)}
		}, result{kvhint.KindRelease, kvhint.Counts{Rejected: 1}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, idx, _, a, now := newHintEngine(t, tc.cfg)
			send(t, e, tc.acts(a.SeqHashes)...)
			apply(t, e, now)
			checkIndex(t, e, idx)
			st := e.Stats().Hints
			if got := st.Kind(tc.want.kind); got != tc.want.want {
				t.Fatalf("%v counts %+v, want %+v", tc.want.kind, got, tc.want.want)
			}
			if st.Total().Total() != 1 {
				t.Fatalf("counted %d actions, sent 1", st.Total().Total())
			}
		})
	}
}

func TestHintDemoteDeferredUntilFreed(t *testing.T) {
	idx := newNaiveIndex(t)
	e, _ := New(Config{BlockSize: 4, DeviceBlocks: 8, HostBlocks: 8, MaxBatchedTokens: 4}, idx)
	a := mkReq(t, 1, 4, []uint64{1, 2, 3}, 12, 3)
	e.Add(a)
	res, _ := e.Step(0) // first chunk: block 0 registered and referenced
	send(t, e, act(kvhint.KindDemote, "s", a.SeqHashes[0]))
	now, _ := drain(t, e, res.Duration)
	apply(t, e, now)
	st := e.Stats().Hints
	if st.Demote != (kvhint.Counts{Deferred: 1, Blocks: 1}) || st.DeferredDemotions != 1 {
		t.Fatalf("demote %+v, deferred demotions %d", st.Demote, st.DeferredDemotions)
	}
	if got := e.Cached(flashindex.Host); !slices.Contains(got, a.SeqHashes[0]) {
		t.Fatalf("host %x lacks the deferred block", got)
	}
	checkIndex(t, e, idx)
}

func TestHintPrefetchCostsWhatADemandLoadCosts(t *testing.T) {
	run := func(prefetch, idleFirst bool) (*Request, time.Duration, HintStats) {
		e, idx, _, a, now := newHintEngine(t, Config{DeviceBlocks: 8, HostBlocks: 8})
		send(t, e, act(kvhint.KindDemote, "s", a.SeqHashes[1:]...))
		apply(t, e, now)
		if prefetch {
			send(t, e, act(kvhint.KindPrefetch, "s", a.SeqHashes[1:]...))
			if idleFirst {
				apply(t, e, now)
				if got := e.Cached(flashindex.Device); !slices.Equal(got, sorted(a.SeqHashes...)) {
					t.Fatalf("after prefetch device %x", got)
				}
			}
		}
		c := mkReq(t, 2, 4, []uint64{1, 2, 3, 4}, 16, 1)
		e.Add(c)
		res, err := e.Step(now)
		if err != nil {
			t.Fatal(err)
		}
		checkIndex(t, e, idx)
		return c, res.Duration, e.Stats().Hints
	}
	tm := Llama3_8B_A100
	want := tm.Step(StepWork{Seqs: 1, Tokens: 4, AttnNanos: tm.AttnCost(12, 4), HostTokens: 8})
	c, d, _ := run(false, false)
	if c.CachedTokens != 4 || c.HostCachedTokens != 8 || d != want {
		t.Fatalf("demand load: %d + %d cached, step %v want %v", c.CachedTokens, c.HostCachedTokens, d, want)
	}
	for _, idleFirst := range []bool{false, true} {
		c, d, st := run(true, idleFirst)
		if c.CachedTokens != 12 || c.HostCachedTokens != 0 {
			t.Fatalf("idle %v: prefetched blocks should be device hits: %d + %d", idleFirst, c.CachedTokens, c.HostCachedTokens)
		}
		if d != want {
			t.Fatalf("idle %v: step %v, want %v (the copy is charged to the next computing step)", idleFirst, d, want)
		}
		if st.Prefetch != (kvhint.Counts{Accepted: 1, Blocks: 2}) || st.HostTokens != 8 {
			t.Fatalf("idle %v: prefetch %+v host tokens %d", idleFirst, st.Prefetch, st.HostTokens)
		}
	}
}

func TestHintPrefetchClippedByFreeBlocks(t *testing.T) {
	idx := newNaiveIndex(t)
	e, _ := New(Config{BlockSize: 4, DeviceBlocks: 3, HostBlocks: 8}, idx)
	a := mkReq(t, 1, 4, []uint64{1, 2, 3}, 12, 1)
	e.Add(a)
	now, _ := drain(t, e, 0)
	send(t, e, act(kvhint.KindDemote, "s", a.SeqHashes...))
	apply(t, e, now)
	b := mkReq(t, 2, 4, []uint64{9}, 4, 6) // holds two blocks while decoding
	e.Add(b)
	res, _ := e.Step(now)
	now += res.Duration
	res, _ = e.Step(now)
	now += res.Duration
	if e.free != 1 {
		t.Fatalf("free %d, want 1", e.free)
	}
	send(t, e, act(kvhint.KindPrefetch, "s", a.SeqHashes...))
	drain(t, e, now)
	if got := e.Stats().Hints.Prefetch; got != (kvhint.Counts{Clipped: 1, Blocks: 1}) {
		t.Fatalf("prefetch %+v", got)
	}
	checkIndex(t, e, idx)
}

func TestHintPinProtectsAndExpires(t *testing.T) {
	// Device 4 blocks: a holds 2 (1, 2); b fills the other 2; c needs 2 and
	// evicts the least recently used: a's, unless they are pinned.
	run := func(pin bool) (*Engine, *Request, time.Duration) {
		idx := newNaiveIndex(t)
		e, _ := New(Config{BlockSize: 4, DeviceBlocks: 4, Hints: HintConfig{MaxPinned: 2}}, idx)
		a := mkReq(t, 1, 4, []uint64{1, 2}, 8, 1)
		e.Add(a)
		now, _ := drain(t, e, 0)
		if pin {
			p := act(kvhint.KindPin, "s", a.SeqHashes...)
			p.TTL = 10 * time.Second
			send(t, e, p)
			apply(t, e, now)
		}
		for i, ids := range [][]uint64{{5, 6}, {7, 8}} {
			e.Add(mkReq(t, uint64(2+i), 4, ids, 8, 1))
			now, _ = drain(t, e, now)
		}
		checkIndex(t, e, idx)
		return e, a, now
	}
	e, a, _ := run(false)
	if slices.Contains(e.Cached(flashindex.Device), a.SeqHashes[0]) {
		t.Fatal("without a pin, a's blocks should be evicted")
	}
	e, a, now := run(true)
	dev := e.Cached(flashindex.Device)
	if !slices.Contains(dev, a.SeqHashes[0]) || !slices.Contains(dev, a.SeqHashes[1]) {
		t.Fatalf("pinned blocks evicted: device %x", dev)
	}
	if st := e.Stats().Hints; st.Pinned != 2 || st.Pin != (kvhint.Counts{Accepted: 1, Blocks: 2}) || e.UsedBlocks() != 2 {
		t.Fatalf("pinned %d, pin %+v, used %d", st.Pinned, st.Pin, e.UsedBlocks())
	}
	// Renewing before the end extends the lease; the old lease's end does
	// not unpin.
	p := act(kvhint.KindPin, "s", a.SeqHashes...)
	p.TTL = 20 * time.Second
	send(t, e, p)
	apply(t, e, now)
	apply(t, e, 15*time.Second)
	if e.Stats().Hints.Pinned != 2 {
		t.Fatal("renewed pin ended with the first lease")
	}
	apply(t, e, now+20*time.Second)
	if st := e.Stats().Hints; st.Pinned != 0 || e.UsedBlocks() != 0 || st.PinsBroken != 0 {
		t.Fatalf("after the lease: pinned %d used %d broken %d", st.Pinned, e.UsedBlocks(), st.PinsBroken)
	}
	// Unpinned blocks go back to the free list as just freed.
	if got := freeOrder(e); got[len(got)-1] != a.SeqHashes[0] && got[len(got)-1] != a.SeqHashes[1] {
		t.Fatalf("free order %x", got)
	}
}

func TestHintPinsBreakRatherThanStall(t *testing.T) {
	for _, running := range []bool{false, true} {
		idx := newNaiveIndex(t)
		e, _ := New(Config{BlockSize: 4, DeviceBlocks: 4, MaxBatchedTokens: 4, Hints: HintConfig{MaxPinned: 2}}, idx)
		a := mkReq(t, 1, 4, []uint64{1, 2}, 8, 1)
		e.Add(a)
		now, _ := drain(t, e, 0)
		send(t, e, act(kvhint.KindPin, "s", a.SeqHashes...))
		apply(t, e, now)
		// 16 tokens need all 4 blocks: either admission (nothing running)
		// or a running request's growth must break the pins.
		b := mkReq(t, 2, 4, []uint64{5, 6, 7, 8}, 16, 1)
		if running {
			b = mkReq(t, 2, 4, []uint64{5}, 4, 12) // grows to 4 blocks while decoding
		}
		e.Add(b)
		drain(t, e, now)
		st := e.Stats().Hints
		if st.PinsBroken != 2 || st.Pinned != 0 || b.Preemptions != 0 {
			t.Fatalf("running %v: broken %d pinned %d preemptions %d", running, st.PinsBroken, st.Pinned, b.Preemptions)
		}
		checkIndex(t, e, idx)
	}
}

func TestHintRetainOrdersEviction(t *testing.T) {
	e, _ := New(Config{BlockSize: 4, DeviceBlocks: 3}, nil)
	var seq []uint64
	now := time.Duration(0)
	for i := uint64(1); i <= 3; i++ {
		r := mkReq(t, i, 4, []uint64{i}, 4, 1)
		e.Add(r)
		now, _ = drain(t, e, now)
		seq = append(seq, r.SeqHashes[0])
	}
	if got := freeOrder(e); !slices.Equal(got, seq) {
		t.Fatalf("LRU order %x, want %x", got, seq)
	}
	hi := act(kvhint.KindRetain, "s", seq[0])
	lo := act(kvhint.KindRetain, "s", seq[1])
	lo.Priority, lo.TTL = 10, 5*time.Second
	send(t, e, hi, lo)
	apply(t, e, now)
	// Default list first, then priority 10, then priority 50.
	if got, want := freeOrder(e), []uint64{seq[2], seq[1], seq[0]}; !slices.Equal(got, want) {
		t.Fatalf("order %x, want %x", got, want)
	}
	// Priority 10 lapses: back to the default list, as just freed.
	apply(t, e, now+5*time.Second)
	if got, want := freeOrder(e), []uint64{seq[2], seq[1], seq[0]}; !slices.Equal(got, want) || e.blocks[mustBlock(t, e, seq[1])].prio != 0 {
		t.Fatalf("order %x, want %x with seq[1] in the default list", got, want)
	}
	// A request needing all three blocks evicts them in that order.
	rec := &recorder{}
	e.em.sink = rec
	e.Add(mkReq(t, 9, 4, []uint64{7, 8, 9}, 12, 1))
	drain(t, e, now+6*time.Second)
	var removed []uint64
	for _, ev := range rec.evs {
		if ev.Kind == flashindex.Removed {
			removed = append(removed, ev.Hashes...)
		}
	}
	if want := []uint64{seq[2], seq[1], seq[0]}; !slices.Equal(removed, want) {
		t.Fatalf("evicted %x, want %x", removed, want)
	}
}

func mustBlock(t *testing.T, e *Engine, h uint64) int32 {
	t.Helper()
	b, ok := e.cached.get(h)
	if !ok {
		t.Fatalf("%x not cached", h)
	}
	return b
}

func TestHintReleaseEvictsFirst(t *testing.T) {
	idx, rec := newNaiveIndex(t), &recorder{}
	e, _ := New(Config{BlockSize: 4, DeviceBlocks: 3, HostBlocks: 2}, tee{idx, rec})
	var seq []uint64
	now := time.Duration(0)
	for i := uint64(1); i <= 3; i++ {
		r := mkReq(t, i, 4, []uint64{i}, 4, 1)
		e.Add(r)
		now, _ = drain(t, e, now)
		seq = append(seq, r.SeqHashes[0])
	}
	send(t, e, act(kvhint.KindRelease, "s", seq[2]))
	apply(t, e, now)
	if got, want := freeOrder(e), []uint64{seq[2], seq[0], seq[1]}; !slices.Equal(got, want) {
		t.Fatalf("order %x, want %x", got, want)
	}
	// Three more one-block requests: the released block leaves the device
	// first and sits at the front of the host LRU, so it is also the first
	// host victim.
	before := len(rec.evs)
	for i := uint64(4); i <= 6; i++ {
		e.Add(mkReq(t, i, 4, []uint64{i}, 4, 1))
		now, _ = drain(t, e, now)
	}
	var order []string
	for _, ev := range rec.evs[before:] {
		if ev.Kind == flashindex.Removed {
			for _, h := range ev.Hashes {
				order = append(order, fmt.Sprintf("%v:%d", ev.Tier, slices.Index(seq, h)))
			}
		}
	}
	if want := []string{"device:2", "device:0", "device:1", "host:2"}; !slices.Equal(order, want) {
		t.Fatalf("removals %v, want %v", order, want)
	}
	checkIndex(t, e, idx)
	// Releasing a host block moves it to the front of the host LRU.
	host := e.Cached(flashindex.Host)
	send(t, e, act(kvhint.KindRelease, "s", host[1]))
	apply(t, e, now)
	if e.host.slots[e.host.slots[e.host.sent].next].hash != host[1] {
		t.Fatal("released host block is not next to go")
	}
	if e.Stats().Hints.Release != (kvhint.Counts{Accepted: 2, Blocks: 2}) {
		t.Fatalf("release %+v", e.Stats().Hints.Release)
	}
}

func TestHintReleaseSkipsReferenced(t *testing.T) {
	e, _ := New(Config{BlockSize: 4, DeviceBlocks: 8, MaxBatchedTokens: 4}, nil)
	a := mkReq(t, 1, 4, []uint64{1, 2}, 8, 4)
	e.Add(a)
	e.Step(0)
	send(t, e, act(kvhint.KindRelease, "s", a.SeqHashes...))
	drain(t, e, 0)
	if got := e.Stats().Hints.Release; got != (kvhint.Counts{Clipped: 1}) {
		t.Fatalf("release %+v", got)
	}
}

func TestHintShare(t *testing.T) {
	tm := Llama3_8B_A100
	for _, dest := range []kvhint.Tier{kvhint.TierDevice, kvhint.TierHost, kvhint.TierNone} {
		idx := []*naiveIndex{newNaiveIndex(t), newNaiveIndex(t)}
		es := make([]*Engine, 2)
		for i := range es {
			es[i], _ = New(Config{Worker: flashindex.Worker{ID: uint64(i)}, BlockSize: 4, DeviceBlocks: 8, HostBlocks: 8}, idx[i])
			es[i].SetPeers(func(w flashindex.Worker) *Engine {
				if w.ID < 2 {
					return es[w.ID]
				}
				return nil
			})
		}
		a := mkReq(t, 1, 4, []uint64{1, 2, 3}, 12, 1)
		es[0].Add(a)
		now, _ := drain(t, es[0], 0)
		sh := act(kvhint.KindShare, "s", a.SeqHashes...)
		sh.Dest = dest
		sh.Sources = []kvhint.Source{
			{Worker: kvhint.WorkerID{ID: 7}, Endpoint: "gone"}, // unknown: skipped
			{Worker: kvhint.WorkerID{ID: 0}, Endpoint: "sim://0", Blocks: 3},
		}
		send(t, es[1], sh)
		apply(t, es[1], now)
		tier := flashindex.Host
		if dest == kvhint.TierDevice {
			tier = flashindex.Device
		}
		if got := es[1].Cached(tier); !slices.Equal(got, sorted(a.SeqHashes...)) {
			t.Fatalf("dest %v: %v holds %x", dest, tier, got)
		}
		st := es[1].Stats().Hints
		if st.Share != (kvhint.Counts{Accepted: 1, Blocks: 3}) || st.PeerTokens != 12 {
			t.Fatalf("dest %v: share %+v peer tokens %d", dest, st.Share, st.PeerTokens)
		}
		c := mkReq(t, 2, 4, []uint64{1, 2, 3, 4}, 16, 1)
		es[1].Add(c)
		res, err := es[1].Step(now)
		if err != nil {
			t.Fatal(err)
		}
		w := StepWork{Seqs: 1, Tokens: 4, AttnNanos: tm.AttnCost(12, 4), PeerTokens: 12}
		if tier == flashindex.Host {
			w.HostTokens = 12 // and then over PCIe
		}
		if want := tm.Step(w); res.Duration != want {
			t.Fatalf("dest %v: step %v, want %v", dest, res.Duration, want)
		}
		for i := range es {
			checkIndex(t, es[i], idx[i])
		}
	}
}

func TestHintShareStopsAtAGap(t *testing.T) {
	es := make([]*Engine, 2)
	for i := range es {
		es[i], _ = New(Config{Worker: flashindex.Worker{ID: uint64(i)}, BlockSize: 4, DeviceBlocks: 8}, nil)
		es[i].SetPeers(func(w flashindex.Worker) *Engine { return es[w.ID%2] })
	}
	a := mkReq(t, 1, 4, []uint64{1, 2, 3}, 12, 1)
	es[0].Add(a)
	now, _ := drain(t, es[0], 0)
	cases := []struct {
		blocks []uint64
		limit  uint32
		want   kvhint.Counts
	}{
		{[]uint64{a.SeqHashes[0], a.SeqHashes[1], 99}, 0, kvhint.Counts{Accepted: 1, Blocks: 2}},
		{[]uint64{a.SeqHashes[0], a.SeqHashes[1]}, 1, kvhint.Counts{Accepted: 1, Blocks: 1}},
		{[]uint64{99}, 0, kvhint.Counts{Missing: 1}},
	}
	for i, tc := range cases {
		e, _ := New(Config{Worker: flashindex.Worker{ID: 1}, BlockSize: 4, DeviceBlocks: 8}, nil)
		e.SetPeers(func(w flashindex.Worker) *Engine { return es[0] })
		sh := act(kvhint.KindShare, "s", tc.blocks...)
		sh.Dest = kvhint.TierDevice
		sh.Sources = []kvhint.Source{{Worker: kvhint.WorkerID{ID: 0}, Endpoint: "sim://0", Blocks: tc.limit}}
		send(t, e, sh)
		apply(t, e, now)
		if got := e.Stats().Hints.Share; got != tc.want {
			t.Fatalf("case %d: share %+v, want %+v", i, got, tc.want)
		}
	}
}

func TestHintQueueBoundsAndCounts(t *testing.T) {
	e, _ := New(Config{BlockSize: 4, DeviceBlocks: 8, Hints: HintConfig{MaxPending: 2}}, nil)
	send(t, e, act(kvhint.KindRelease, "a", 1))
	send(t, e, act(kvhint.KindRelease, "b", 2), act(kvhint.KindPin, "b", 2))
	env := &kvhint.Envelope{MessageID: "x", Actions: []kvhint.Action{act(kvhint.KindDemote, "c", 3), {ID: "9", Kind: 42, SessionID: "c"}}}
	if err := e.Send(t.Context(), env); !errors.Is(err, kvhint.ErrQueueFull) {
		t.Fatalf("third envelope: %v", err)
	}
	if err := e.Send(t.Context(), nil); !errors.Is(err, kvhint.ErrInvalid) {
		t.Fatalf("nil envelope: %v", err)
	}
	if e.PendingHints() != 3 {
		t.Fatalf("pending %d", e.PendingHints())
	}
	apply(t, e, 0)
	st := e.Stats().Hints
	if st.Dropped != 1 || st.Demote.Rejected != 1 || st.Invalid != 1 || st.Release.Missing != 2 || st.Pin.Missing != 1 {
		t.Fatalf("stats %+v", st)
	}
	// The queue is empty again.
	send(t, e, act(kvhint.KindRelease, "d", 4))
	send(t, e, act(kvhint.KindRelease, "e", 5))
	apply(t, e, 0)
}

func TestHintEngineCopiesTargets(t *testing.T) {
	e, idx, _, a, now := newHintEngine(t, Config{DeviceBlocks: 8, HostBlocks: 8})
	blocks := slices.Clone(a.SeqHashes)
	send(t, e, act(kvhint.KindDemote, "s", blocks...))
	clear(blocks) // the caller reuses its slice
	apply(t, e, now)
	if got := e.Stats().Hints.Demote; got.Blocks != 3 {
		t.Fatalf("demote %+v: the engine must copy the target", got)
	}
	checkIndex(t, e, idx)
}

// TestHintApplyOrderIsDeterministic: hints that arrive between two steps
// are applied grouped by session, so the order in which a router sends
// them (a map walk) does not change the run.
func TestHintApplyOrderIsDeterministic(t *testing.T) {
	streams := make([][]flashindex.Event, 2)
	for k := range streams {
		rec := &recorder{}
		e, _ := New(Config{BlockSize: 4, DeviceBlocks: 6, HostBlocks: 2}, rec)
		var reqs []*Request
		now := time.Duration(0)
		for i := uint64(1); i <= 3; i++ {
			r := mkReq(t, i, 4, []uint64{i, i + 10}, 8, 1)
			e.Add(r)
			now, _ = drain(t, e, now)
			reqs = append(reqs, r)
		}
		acts := []kvhint.Action{
			act(kvhint.KindDemote, "a", reqs[0].SeqHashes...),
			act(kvhint.KindDemote, "b", reqs[1].SeqHashes...),
			act(kvhint.KindDemote, "c", reqs[2].SeqHashes...),
		}
		if k == 1 {
			slices.Reverse(acts)
		}
		for _, a := range acts {
			send(t, e, a)
		}
		apply(t, e, now)
		streams[k] = rec.evs
	}
	if !reflect.DeepEqual(streams[0], streams[1]) {
		t.Fatal("the send order changed the event stream")
	}
}

// checkEngineHintOps drives two peer engines from bytes like
// checkEngineOps, interleaving random hints of every kind on hashes the
// engines have seen (or not). After every step: the naive index equals the
// engine's tiers, pool accounting holds (pins included), and every hint
// action sent and applied is counted exactly once.
func checkEngineHintOps(t *testing.T, data []byte) {
	if len(data) < 6 {
		return
	}
	bs := 4
	cfg := Config{
		BlockSize:        bs,
		DeviceBlocks:     4 + int(data[0]%24),
		HostBlocks:       int(data[1] % 16),
		MaxBatch:         1 + int(data[2]%6),
		MaxBatchedTokens: 4 + int(data[3]%48),
		Hints:            HintConfig{MaxPinned: int(data[4]%8) - 1, MaxPending: 1 + int(data[5]%4)},
	}
	if cfg.Hints.MaxPinned == 0 {
		cfg.Hints.MaxPinned = 2
	}
	data = data[6:]
	es := make([]*Engine, 2)
	idx := make([]*naiveIndex, 2)
	for i := range es {
		c := cfg
		c.Worker = flashindex.Worker{ID: uint64(i)}
		idx[i] = newNaiveIndex(t)
		var err error
		if es[i], err = New(c, idx[i]); err != nil {
			t.Fatal(err)
		}
		es[i].SetPeers(func(w flashindex.Worker) *Engine {
			if w.ID < 2 {
				return es[w.ID]
			}
			return nil
		})
	}
	sent := [2]int{}
	var seen []uint64
	now := time.Duration(0)
	check := func(where string, i int) {
		e := es[i]
		checkIndex(t, e, idx[i])
		held := 0
		for _, r := range e.running {
			held += len(r.st.blocks)
		}
		if held+e.hints.pinned < e.UsedBlocks() || e.UsedBlocks() > cfg.DeviceBlocks {
			t.Fatalf("%s: %d references + %d pins for %d used blocks", where, held, e.hints.pinned, e.UsedBlocks())
		}
		if cfg.HostBlocks > 0 && e.host.used > cfg.HostBlocks {
			t.Fatalf("%s: host holds %d of %d", where, e.host.used, cfg.HostBlocks)
		}
		if e.PendingHints() == 0 {
			st := e.Stats().Hints
			if got := st.Total().Total() + int(st.Invalid); got != sent[i] {
				t.Fatalf("%s: counted %d actions, sent %d (%+v)", where, got, sent[i], st)
			}
		}
	}
	step := func(i int) {
		res, err := es[i].Step(now)
		if err != nil {
			t.Fatal(err)
		}
		now += res.Duration
		check("step", i)
	}
	id := uint64(0)
	for len(data) >= 4 {
		op, x, y, z := data[0], data[1], data[2], data[3]
		w := int(op>>7) & 1
		switch op % 4 {
		case 0:
			step(w)
			data = data[1:]
			continue
		case 1, 2:
			n := 1 + int(x%6)
			ids := make([]uint64, n)
			for i := range ids {
				ids[i] = uint64(y>>(i%4)) % 3
			}
			in := n*bs - int(z%uint8(bs))
			id++
			l, s, err := AppendBlockHashes(nil, nil, ids, bs, bs, in, id)
			if err != nil {
				t.Fatal(err)
			}
			seen = append(seen, s...)
			r := &Request{ID: id, InputTokens: in, OutputTokens: int(x >> 4), LocalHashes: l, SeqHashes: s}
			if err := es[w].Add(r); err != nil && !errors.Is(err, ErrTooLarge) {
				t.Fatal(err)
			}
		case 3:
			kind := kvhint.Kind(1 + x%6)
			var blocks []uint64
			if len(seen) > 0 {
				from := int(y) % len(seen)
				blocks = slices.Clone(seen[from:min(len(seen), from+1+int(z%8))])
			}
			if z&0x80 != 0 {
				blocks = append(blocks, uint64(z)) // unknown hash
			}
			a := act(kind, fmt.Sprint("s", y%3), blocks...)
			a.ID = "1"
			switch kind {
			case kvhint.KindPin:
				a.TTL = time.Duration(1+z%4) * 50 * time.Millisecond
			case kvhint.KindRetain:
				a.TTL, a.Priority = time.Duration(1+z%4)*50*time.Millisecond, int32(1+y%100)
			case kvhint.KindShare:
				a.Sources = []kvhint.Source{{Worker: kvhint.WorkerID{ID: uint64(1 - w)}, Endpoint: "p"}}
				a.Dest = []kvhint.Tier{kvhint.TierNone, kvhint.TierDevice, kvhint.TierHost}[z%3]
			}
			if x&0x40 != 0 {
				a.Limit = uint32(1 + y%3)
			}
			err := es[w].Send(t.Context(), &kvhint.Envelope{MessageID: "m", Actions: []kvhint.Action{a}})
			if err != nil && !errors.Is(err, kvhint.ErrQueueFull) {
				t.Fatal(err)
			}
			sent[w]++
		}
		data = data[4:]
	}
	for i, e := range es {
		for steps := 0; e.HasWork() || e.PendingHints() > 0; steps++ {
			if steps > 100_000 {
				t.Fatal("engine does not drain")
			}
			step(i)
		}
		// Past every lease, nothing is referenced.
		now += time.Hour
		step(i)
		if e.UsedBlocks() != 0 || e.hints.pinned != 0 {
			t.Fatalf("worker %d: %d blocks still referenced, %d pinned", i, e.UsedBlocks(), e.hints.pinned)
		}
	}
}

func TestEngineRandomHintOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	n := 300
	if raceEnabled {
		n = 60
	}
	for range n {
		data := make([]byte, 6+rng.IntN(400))
		for i := range data {
			data[i] = byte(rng.IntN(256))
		}
		checkEngineHintOps(t, data)
	}
}

func FuzzEngineHints(f *testing.F) {
	f.Add([]byte{10, 5, 3, 20, 3, 1, 1, 2, 3, 0, 0, 3, 0, 1, 2, 0, 3, 2, 0, 5, 0, 0})
	f.Add([]byte{3, 9, 0, 7, 0, 0, 1, 5, 255, 6, 3, 3, 1, 1, 0, 131, 4, 0, 8, 0, 3, 5, 0, 0})
	f.Add([]byte{20, 15, 2, 40, 7, 3, 2, 3, 1, 0, 0, 3, 1, 0, 7, 3, 2, 1, 3, 0, 0, 3, 4, 0, 0, 0})
	f.Fuzz(checkEngineHintOps)
}

// hintRouter is a round-robin router that, at every tick, tells each
// engine to demote the blocks of every request that finished on it since
// the last tick, walking a map (random order).
type hintRouter struct {
	rrRouter
	es   []*Engine
	done map[string][]uint64 // session → blocks, per engine index below
	on   map[string]int
}

func (h *hintRouter) Finished(_ time.Duration, r *Request) []uint64 {
	h.done[r.Session] = append(h.done[r.Session], r.SeqHashes...)
	h.on[r.Session] = r.Worker
	return nil
}

func (h *hintRouter) Tick(time.Duration) []uint64 {
	for s, blocks := range h.done {
		e := h.es[h.on[s]]
		_ = e.Send(context.Background(), &kvhint.Envelope{MessageID: s, Actions: []kvhint.Action{{ID: "0", Kind: kvhint.KindDemote, SessionID: s, Dest: kvhint.TierHost, Target: kvhint.Target{Blocks: blocks}}}})
	}
	clear(h.done)
	return nil
}

// TestReplayAppliesHintsAtTheirTime: hints sent from a tick reach idle
// engines at the tick's virtual time, the run stays deterministic although
// the router sends in map order, and the event streams stay consistent.
func TestReplayAppliesHintsAtTheirTime(t *testing.T) {
	once := func() (*Result, [][]flashindex.Event, []*naiveIndex, []*Engine) {
		w := genAgentic(3, 16)
		recs := []*recorder{{}, {}}
		idx := []*naiveIndex{newNaiveIndex(t), newNaiveIndex(t)}
		es := engines(t, 2, Config{DeviceBlocks: 400, HostBlocks: 300, MaxBatchedTokens: 1024}, func(i int) EventSink { return tee{idx[i], recs[i]} })
		h := &hintRouter{rrRouter: rrRouter{n: 2}, es: es, done: map[string][]uint64{}, on: map[string]int{}}
		res, _ := run(t, w, es, h, ReplayConfig{TickInterval: time.Second})
		return res, [][]flashindex.Event{recs[0].evs, recs[1].evs}, idx, es
	}
	r1, ev1, idx, es := once()
	r2, ev2, _, _ := once()
	if !reflect.DeepEqual(r1, r2) || !reflect.DeepEqual(ev1, ev2) {
		t.Fatal("hints sent in map order made the run nondeterministic")
	}
	demoted := 0
	for i, e := range es {
		checkIndex(t, e, idx[i])
		st := e.Stats().Hints
		demoted += int(st.Demote.Blocks)
		if st.Demote.Total() == 0 || st.Demote.Rejected != 0 {
			t.Fatalf("worker %d: demote %+v", i, st.Demote)
		}
	}
	if demoted == 0 || r1.HostCachedTokens == 0 {
		t.Fatalf("demoted %d blocks, host hits %d tokens", demoted, r1.HostCachedTokens)
	}
}

// TestNoHintsNoHintEffects: without hints the hint machinery never acts
// (in particular no host block is ever dropped as an orphan).
func TestNoHintsNoHintEffects(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		w := genAgentic(seed, 20)
		es := engines(t, 2, Config{DeviceBlocks: 300, HostBlocks: 150, MaxBatchedTokens: 1024}, nil)
		run(t, w, es, &rrRouter{n: 2}, ReplayConfig{})
		for i, e := range es {
			if st := e.Stats().Hints; st != (HintStats{}) {
				t.Fatalf("seed %d worker %d: %+v", seed, i, st)
			}
			if e.Stats().HostEvicted == 0 && seed == 1 && i == 0 {
				t.Log("note: no host evictions in this run")
			}
		}
	}
}

// An engine with a host tier demotes a finished request's tail when told,
// and its next turn finds the tail on the host.
func ExampleEngine_Send() {
	e, _ := New(Config{BlockSize: 4, DeviceBlocks: 8, HostBlocks: 8}, nil)
	l, s, _ := AppendBlockHashes(nil, nil, []uint64{1, 2, 3}, 4, 4, 12, 1)
	e.Add(&Request{ID: 1, InputTokens: 12, OutputTokens: 1, LocalHashes: l, SeqHashes: s})
	now := time.Duration(0)
	for e.HasWork() {
		res, _ := e.Step(now)
		now += res.Duration
	}
	_ = e.Send(context.Background(), &kvhint.Envelope{MessageID: "m-1", Actions: []kvhint.Action{{
		ID: "m-1.0", Kind: kvhint.KindDemote, SessionID: "s", Dest: kvhint.TierHost,
		Target: kvhint.Target{Blocks: s[1:]},
	}}})
	e.Step(now) // applies the hint (the engine is idle: nothing else happens)
	st := e.Stats().Hints
	fmt.Printf("device %d, host %d, demote %+v\n", len(e.Cached(flashindex.Device)), len(e.Cached(flashindex.Host)), st.Demote)

	l, s, _ = AppendBlockHashes(nil, nil, []uint64{1, 2, 3, 4}, 4, 4, 16, 2)
	next := &Request{ID: 2, InputTokens: 16, OutputTokens: 1, LocalHashes: l, SeqHashes: s}
	e.Add(next)
	e.Step(now)
	fmt.Printf("next turn: %d tokens from the device, %d from the host\n", next.CachedTokens, next.HostCachedTokens)
	// Output:
	// device 1, host 2, demote {Accepted:1 Clipped:0 Deferred:0 Rejected:0 Missing:0 Blocks:2}
	// next turn: 4 tokens from the device, 8 from the host
}
