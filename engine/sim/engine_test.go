package sim

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/agentkv/agentkv/flashindex"
)

// mkReq builds a request whose workload blocks are engine blocks (ids name
// blocks of bs tokens).
func mkReq(t *testing.T, id uint64, bs int, ids []uint64, input, output int) *Request {
	t.Helper()
	l, s, err := AppendBlockHashes(nil, nil, ids, bs, bs, input, id)
	if err != nil {
		t.Fatal(err)
	}
	return &Request{ID: id, InputTokens: input, OutputTokens: output, LocalHashes: l, SeqHashes: s, Worker: -1}
}

// drain steps e until it is idle, starting at now; it returns the end time
// and the number of steps.
func drain(t *testing.T, e *Engine, now time.Duration) (time.Duration, int) {
	t.Helper()
	steps := 0
	for e.HasWork() {
		res, err := e.Step(now)
		if err != nil {
			t.Fatal(err)
		}
		now += res.Duration
		steps++
		if steps > 1_000_000 {
			t.Fatal("engine does not finish")
		}
	}
	return now, steps
}

// recorder keeps a copy of every event.
type recorder struct{ evs []flashindex.Event }

func (r *recorder) Apply(ev *flashindex.Event) error {
	c := *ev
	c.Blocks = slices.Clone(ev.Blocks)
	c.Hashes = slices.Clone(ev.Hashes)
	r.evs = append(r.evs, c)
	return nil
}

func TestTimingArithmetic(t *testing.T) {
	tm := Llama3_8B_A100
	cases := []struct {
		name string
		w    StepWork
		want time.Duration
	}{
		// 1,096,000 + 37,500 + 10,457,000 (weight floor) + max(3,361 FLOP, 91,340 KV read)
		{"one decode at 999 context", StepWork{Seqs: 1, Tokens: 1, AttnNanos: tm.AttnCost(999, 1)}, 11_681_840},
		// 1,096,000 + 37,500 + 2048·65,810 + 2,098,176 pairs·3.361 ns (floor of 7,051,969.5)
		{"fresh 2048-token prefill", StepWork{Seqs: 1, Tokens: 2048, AttnNanos: tm.AttnCost(0, 2048)}, 142_964_349},
		// the above + 160 tokens loaded from host · 5,243 ns
		{"prefill with host load", StepWork{Seqs: 1, Tokens: 2048, AttnNanos: tm.AttnCost(0, 2048), HostTokens: 160}, 142_964_349 + 838_880},
		// 8 decodes at 10,000 context: 1,096,000 + 8·37,500 + 10,457,000 + 8·(10,000·91.34 ns)
		{"eight long decodes", StepWork{Seqs: 8, Tokens: 8, AttnNanos: 8 * tm.AttnCost(9999, 1)}, 1_096_000 + 300_000 + 10_457_000 + 8*913_400},
		{"idle step costs the floor", StepWork{}, 1_096_000 + 10_457_000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := tm.Step(c.w); got != c.want {
				t.Fatalf("Step = %d ns, want %d ns", got, c.want)
			}
		})
	}
}

func TestSingleRequestStepTime(t *testing.T) {
	e, err := New(Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := mkReq(t, 1, 16, nil, 2048, 1)
	if err := e.Add(r); err != nil {
		t.Fatal(err)
	}
	res, err := e.Step(0)
	if err != nil {
		t.Fatal(err)
	}
	if res.Duration != 142_964_349 || r.FirstToken != res.Duration || r.Finished != res.Duration || len(res.Finished) != 1 {
		t.Fatalf("step %v, first token %v, finished %v (%d)", res.Duration, r.FirstToken, r.Finished, len(res.Finished))
	}
	if e.HasWork() || e.UsedBlocks() != 0 || e.CachedBlocks() != 128 {
		t.Fatalf("after finish: work %v used %d cached %d", e.HasWork(), e.UsedBlocks(), e.CachedBlocks())
	}
}

func TestConfigValidation(t *testing.T) {
	for _, c := range []Config{
		{BlockSize: -1}, {DeviceBlocks: -5}, {HostBlocks: -1}, {MaxBatch: -1}, {MaxBatchedTokens: -2},
		{Timing: Timing{PerToken: -1}},
	} {
		if _, err := New(c, nil); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", c, err)
		}
	}
	e, err := New(Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := e.Config()
	if c.BlockSize != 16 || c.DeviceBlocks != 27_500 || c.MaxBatch != 256 || c.MaxBatchedTokens != 8192 || c.Timing != Llama3_8B_A100 {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestCapacity(t *testing.T) {
	e, _ := New(Config{BlockSize: 4, DeviceBlocks: 4}, nil)
	cases := []struct {
		in, out int
		err     error
	}{
		{16, 1, nil},         // 16 tokens of KV: 4 blocks
		{13, 4, nil},         // 13 + 3 generated tokens need KV: 16
		{17, 1, ErrTooLarge}, // 17 tokens: 5 blocks
		{14, 4, ErrTooLarge}, // 14 + 3 = 17
		{0, 1, ErrRequest},   // no prompt
		{4, -1, ErrRequest},  // negative output
		{16, 0, nil},         // 0 output counts as 1
		{12, 5, nil},         // 12 + 4 = 16
		{15, 3, ErrTooLarge}, // 15 + 2 = 17
	}
	for i, c := range cases {
		r := mkReq(t, uint64(i), 4, nil, max(c.in, 1), c.out)
		r.InputTokens = c.in
		if c.in < 4 {
			r.LocalHashes, r.SeqHashes = nil, nil
		}
		err := e.Add(r)
		if !errors.Is(err, c.err) {
			t.Errorf("in %d out %d: %v, want %v", c.in, c.out, err, c.err)
		}
		if errors.Is(c.err, ErrTooLarge) != r.Rejected {
			t.Errorf("in %d out %d: Rejected = %v", c.in, c.out, r.Rejected)
		}
	}
	// A full pool: all accepted requests run to completion one after another.
	end, _ := drain(t, e, 0)
	if e.Stats().Finished != 4 || end <= 0 || e.UsedBlocks() != 0 {
		t.Fatalf("finished %d used %d", e.Stats().Finished, e.UsedBlocks())
	}
}

func TestLRUEvictionOrder(t *testing.T) {
	rec := &recorder{}
	e, _ := New(Config{BlockSize: 4, DeviceBlocks: 4}, rec)
	a := mkReq(t, 1, 4, []uint64{1, 2}, 8, 1)
	b := mkReq(t, 2, 4, []uint64{3, 4}, 8, 1)
	c := mkReq(t, 3, 4, []uint64{5}, 4, 1)
	d := mkReq(t, 4, 4, []uint64{1, 2, 9}, 12, 1)
	now := time.Duration(0)
	for _, r := range []*Request{a, b, c, d} {
		if err := e.Add(r); err != nil {
			t.Fatal(err)
		}
		now, _ = drain(t, e, now)
	}
	// a's tail block was evicted by c (tail first), its head survived for d.
	if d.CachedTokens != 4 {
		t.Fatalf("d cached %d tokens, want 4 (a's first block only)", d.CachedTokens)
	}
	A0, A1, B0, B1, C0 := a.SeqHashes[0], a.SeqHashes[1], b.SeqHashes[0], b.SeqHashes[1], c.SeqHashes[0]
	type ev struct {
		kind   flashindex.EventKind
		hashes []uint64
	}
	want := []ev{
		{flashindex.Stored, []uint64{A0, A1}},
		{flashindex.Stored, []uint64{B0, B1}},
		{flashindex.Removed, []uint64{A1}},
		{flashindex.Stored, []uint64{C0}},
		{flashindex.Removed, []uint64{B1, B0}},
		{flashindex.Stored, []uint64{d.SeqHashes[1], d.SeqHashes[2]}},
	}
	if len(rec.evs) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(rec.evs), len(want), rec.evs)
	}
	for i, w := range want {
		got := rec.evs[i]
		hs := got.Hashes
		if got.Kind == flashindex.Stored {
			hs = nil
			for _, b := range got.Blocks {
				hs = append(hs, b.EngineHash)
			}
		}
		if got.Kind != w.kind || !slices.Equal(hs, w.hashes) || got.EventID != uint64(i) || got.Tier != flashindex.Device || got.BlockSize != 4 {
			t.Fatalf("event %d = %+v, want %v %x", i, got, w.kind, w.hashes)
		}
	}
	if last := rec.evs[5]; !last.HasParent || last.Parent != A0 {
		t.Fatalf("d's blocks must chain under a's first block: %+v", last)
	}
	wantCached := []uint64{A0, C0, d.SeqHashes[1], d.SeqHashes[2]}
	slices.Sort(wantCached)
	if got := e.Cached(flashindex.Device); !slices.Equal(got, wantCached) {
		t.Fatalf("cached %x, want %x", got, wantCached)
	}
}

func TestFullPromptHitRecomputesLastBlock(t *testing.T) {
	e, _ := New(Config{BlockSize: 4, DeviceBlocks: 8}, nil)
	a := mkReq(t, 1, 4, []uint64{1, 2}, 8, 1)
	b := mkReq(t, 2, 4, []uint64{1, 2}, 8, 1)
	c := mkReq(t, 3, 4, []uint64{1, 2}, 9, 1) // one token more: both blocks hit
	now := time.Duration(0)
	for _, r := range []*Request{a, b, c} {
		e.Add(r)
		now, _ = drain(t, e, now)
	}
	if a.CachedTokens != 0 || b.CachedTokens != 4 || c.CachedTokens != 8 {
		t.Fatalf("cached tokens %d %d %d, want 0 4 8", a.CachedTokens, b.CachedTokens, c.CachedTokens)
	}
	if b.ComputedTokens != 4 || c.ComputedTokens != 1 {
		t.Fatalf("computed %d %d, want 4 1", b.ComputedTokens, c.ComputedTokens)
	}
}

func TestPreemptionRecompute(t *testing.T) {
	rec := newNaiveIndex(t)
	e, _ := New(Config{BlockSize: 4, DeviceBlocks: 4}, rec)
	a := mkReq(t, 1, 4, []uint64{1}, 4, 10)
	b := mkReq(t, 2, 4, []uint64{2}, 4, 10)
	e.Add(a)
	e.Add(b)
	var ends []time.Duration
	now := time.Duration(0)
	preemptStep := -1
	for e.HasWork() {
		res, err := e.Step(now)
		if err != nil {
			t.Fatal(err)
		}
		now += res.Duration
		ends = append(ends, now)
		if res.Preempted > 0 {
			if preemptStep >= 0 {
				t.Fatalf("second preemption at step %d", len(ends))
			}
			preemptStep = len(ends)
		}
	}
	// Steps 1-5 run both (prompt, then decodes to 8 tokens each: 2 blocks
	// each, the pool is full). Step 6: a needs a third block, b (newest) is
	// preempted. b cannot come back while a holds 3-4 blocks; a finishes at
	// step 10, b re-prefills its 4+5 tokens at step 11 (its cached blocks
	// were evicted by a) and decodes its last 4 tokens in steps 12-15.
	if preemptStep != 6 || len(ends) != 15 {
		t.Fatalf("preempted at step %d of %d, want 6 of 15", preemptStep, len(ends))
	}
	if a.Preemptions != 0 || b.Preemptions != 1 || e.Stats().Preemptions != 1 {
		t.Fatalf("preemptions a %d b %d", a.Preemptions, b.Preemptions)
	}
	if a.Finished != ends[9] || b.Finished != ends[14] {
		t.Fatalf("a finished %v (want %v), b %v (want %v)", a.Finished, ends[9], b.Finished, ends[14])
	}
	if b.RecomputedTokens != 8 || b.ComputedTokens != 8+9+4 || a.ComputedTokens != 4+9 {
		t.Fatalf("b recomputed %d computed %d, a computed %d", b.RecomputedTokens, b.ComputedTokens, a.ComputedTokens)
	}
	if b.FirstToken != ends[0] {
		t.Fatalf("first token must not move on recompute: %v vs %v", b.FirstToken, ends[0])
	}
	if got := e.Cached(flashindex.Device); !slices.Equal(got, rec.hashes(flashindex.Device)) {
		t.Fatalf("engine cache %x, events say %x", got, rec.hashes(flashindex.Device))
	}
}

func TestChunkedPrefill(t *testing.T) {
	tm := Llama3_8B_A100
	e, _ := New(Config{MaxBatchedTokens: 4096}, nil)
	long := mkReq(t, 1, 16, nil, 10000, 2)
	e.Add(long)
	type step struct {
		tokens int
		dur    time.Duration
	}
	want := []step{
		{4096, tm.Step(StepWork{Seqs: 1, Tokens: 4096, AttnNanos: tm.AttnCost(0, 4096)})},
		{4096, tm.Step(StepWork{Seqs: 1, Tokens: 4096, AttnNanos: tm.AttnCost(4096, 4096)})},
		{1808, tm.Step(StepWork{Seqs: 1, Tokens: 1808, AttnNanos: tm.AttnCost(8192, 1808)})},
		{1, tm.Step(StepWork{Seqs: 1, Tokens: 1, AttnNanos: tm.AttnCost(10000, 1)})},
	}
	now := time.Duration(0)
	for i, w := range want {
		res, err := e.Step(now)
		if err != nil {
			t.Fatal(err)
		}
		if res.Tokens != w.tokens || res.Duration != w.dur {
			t.Fatalf("step %d: %d tokens in %v, want %d in %v", i, res.Tokens, res.Duration, w.tokens, w.dur)
		}
		now += res.Duration
		if i == 2 && long.FirstToken != now {
			t.Fatalf("first token at %v, want end of the last chunk %v", long.FirstToken, now)
		}
	}
	if long.Finished != now || e.HasWork() {
		t.Fatalf("finished at %v, want %v", long.Finished, now)
	}

	// A decoding request keeps its token while a new prompt is chunked
	// into the rest of the budget.
	dec := mkReq(t, 2, 16, nil, 100, 50)
	e.Add(dec)
	e.Step(now)
	big := mkReq(t, 3, 16, nil, 9000, 1)
	e.Add(big)
	res, _ := e.Step(now)
	if res.Seqs != 2 || res.Tokens != 4096 || big.st.computed != 4095 {
		t.Fatalf("mixed step: %d seqs %d tokens, prompt chunk %d", res.Seqs, res.Tokens, big.st.computed)
	}
}

func TestHostTier(t *testing.T) {
	tm := Llama3_8B_A100
	idx := newNaiveIndex(t)
	e, _ := New(Config{BlockSize: 4, DeviceBlocks: 3, HostBlocks: 4}, idx)
	a := mkReq(t, 1, 4, []uint64{1, 2}, 8, 1)
	b := mkReq(t, 2, 4, []uint64{3, 4}, 8, 1)
	c := mkReq(t, 3, 4, []uint64{1, 2, 5}, 12, 1)
	now := time.Duration(0)
	for _, r := range []*Request{a, b} {
		e.Add(r)
		now, _ = drain(t, e, now)
	}
	// b took the unused block and a's tail block, which went to the host.
	if got := e.Cached(flashindex.Host); !slices.Equal(got, []uint64{a.SeqHashes[1]}) {
		t.Fatalf("host %x, want a's tail", got)
	}
	e.Add(c)
	res, err := e.Step(now)
	if err != nil {
		t.Fatal(err)
	}
	if c.CachedTokens != 4 || c.HostCachedTokens != 4 {
		t.Fatalf("c cached %d device + %d host tokens, want 4 + 4", c.CachedTokens, c.HostCachedTokens)
	}
	want := tm.Step(StepWork{Seqs: 1, Tokens: 4, AttnNanos: tm.AttnCost(8, 4), HostTokens: 4})
	if res.Duration != want {
		t.Fatalf("step %v, want %v (with a 4-token host load)", res.Duration, want)
	}
	// Loading a's tail and c's new block evicted b's two blocks to the host;
	// a host hit stays on the host.
	wantHost := []uint64{a.SeqHashes[1], b.SeqHashes[0], b.SeqHashes[1]}
	slices.Sort(wantHost)
	if got := e.Cached(flashindex.Host); !slices.Equal(got, wantHost) {
		t.Fatalf("host %x, want %x", got, wantHost)
	}
	wantDev := []uint64{a.SeqHashes[0], a.SeqHashes[1], c.SeqHashes[2]}
	slices.Sort(wantDev)
	for _, tier := range []flashindex.Tier{flashindex.Device, flashindex.Host} {
		if got := e.Cached(tier); !slices.Equal(got, idx.hashes(tier)) {
			t.Fatalf("%v: engine %x, events %x", tier, got, idx.hashes(tier))
		}
	}
	if got := e.Cached(flashindex.Device); !slices.Equal(got, wantDev) {
		t.Fatalf("device %x, want %x", got, wantDev)
	}
	// A full host tier drops its least recently used block.
	e2, _ := New(Config{BlockSize: 4, DeviceBlocks: 1, HostBlocks: 1}, newNaiveIndex(t))
	for i := uint64(1); i <= 3; i++ {
		e2.Add(mkReq(t, i, 4, []uint64{i}, 4, 1))
		drain(t, e2, 0)
	}
	if got := e2.Cached(flashindex.Host); len(got) != 1 || e2.Stats().HostEvicted != 1 {
		t.Fatalf("host %x, evicted %d", got, e2.Stats().HostEvicted)
	}
}

func TestSinkErrorIsReturned(t *testing.T) {
	boom := errors.New("boom")
	e, _ := New(Config{BlockSize: 4, DeviceBlocks: 8}, EventSinkFunc(func(*flashindex.Event) error { return boom }))
	e.Add(mkReq(t, 1, 4, []uint64{1, 2}, 8, 1))
	if _, err := e.Step(0); !errors.Is(err, boom) {
		t.Fatalf("Step = %v, want the sink's error", err)
	}
}

func TestAddRejectsMalformed(t *testing.T) {
	e, _ := New(Config{BlockSize: 4, DeviceBlocks: 8}, nil)
	r := mkReq(t, 1, 4, []uint64{1, 2}, 8, 1)
	r.InputTokens = 7 // two hashes for one full block
	if err := e.Add(r); !errors.Is(err, ErrRequest) {
		t.Fatalf("Add = %v", err)
	}
	r2 := mkReq(t, 2, 4, []uint64{1}, 8, 1)
	r2.LocalHashes = r2.LocalHashes[:1]
	if err := e.Add(r2); !errors.Is(err, ErrRequest) {
		t.Fatalf("Add = %v", err)
	}
	r3 := mkReq(t, 3, 4, nil, 8, 1)
	e.Add(r3)
	if err := e.Add(r3); !errors.Is(err, ErrRequest) {
		t.Fatalf("double Add = %v", err)
	}
}
