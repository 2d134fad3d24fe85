package sim

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/agentkv/agentkv/flashindex"
)

// checkEngineOps drives an engine from bytes: the first five pick the
// configuration, then each op adds a request (ids from a small alphabet,
// so prompts share prefixes) or steps. After every step the naive index
// rebuilt from the events must equal the engine's cache on both tiers, and
// the pool's accounting must hold. At the end every accepted request has
// finished and nothing is referenced.
func checkEngineOps(t *testing.T, data []byte) {
	if len(data) < 5 {
		return
	}
	bs := 4 << (data[0] % 2)
	cfg := Config{
		BlockSize:        bs,
		DeviceBlocks:     4 + int(data[1]%40),
		HostBlocks:       int(data[2] % 24),
		MaxBatch:         1 + int(data[3]%8),
		MaxBatchedTokens: 4 + int(data[4]%64),
	}
	data = data[5:]
	idx := newNaiveIndex(t)
	e, err := New(cfg, idx)
	if err != nil {
		t.Fatal(err)
	}
	check := func(where string) {
		for _, tier := range []flashindex.Tier{flashindex.Device, flashindex.Host} {
			if got, want := e.Cached(tier), idx.hashes(tier); !slices.Equal(got, want) {
				t.Fatalf("%s: %v cache %x, events say %x", where, tier, got, want)
			}
		}
		if u := e.UsedBlocks(); u < 0 || u > cfg.DeviceBlocks || e.CachedBlocks() > cfg.DeviceBlocks {
			t.Fatalf("%s: used %d cached %d of %d", where, u, e.CachedBlocks(), cfg.DeviceBlocks)
		}
		if cfg.HostBlocks > 0 && e.host.used > cfg.HostBlocks {
			t.Fatalf("%s: host holds %d of %d", where, e.host.used, cfg.HostBlocks)
		}
		held := 0
		for _, r := range e.running {
			held += len(r.st.blocks)
		}
		if held < e.UsedBlocks() {
			t.Fatalf("%s: running requests hold %d block references, %d blocks are in use", where, held, e.UsedBlocks())
		}
	}
	var accepted []*Request
	now := time.Duration(0)
	step := func() {
		res, err := e.Step(now)
		if err != nil {
			t.Fatal(err)
		}
		now += res.Duration
		check("step")
	}
	id := uint64(0)
	for len(data) >= 3 {
		op := data[0]
		if op%4 == 0 {
			step()
			data = data[1:]
			continue
		}
		n := 1 + int(data[1]%6)
		ids := make([]uint64, n)
		for i := range ids {
			ids[i] = uint64(data[2]>>(i%4)) % 3
		}
		in := n*bs - int(op%uint8(bs))
		out := int(data[1] >> 4)
		id++
		l, s, err := AppendBlockHashes(nil, nil, ids, bs, bs, in, id)
		if err != nil {
			t.Fatal(err)
		}
		r := &Request{ID: id, InputTokens: in, OutputTokens: out, LocalHashes: l, SeqHashes: s}
		switch err := e.Add(r); {
		case err == nil:
			accepted = append(accepted, r)
		case errors.Is(err, ErrTooLarge):
		default:
			t.Fatal(err)
		}
		data = data[3:]
	}
	for steps := 0; e.HasWork(); steps++ {
		if steps > 100_000 {
			t.Fatal("engine does not drain")
		}
		step()
	}
	for _, r := range accepted {
		if r.Finished == 0 || r.FirstToken == 0 || r.FirstToken > r.Finished || r.ComputedTokens < r.InputTokens-r.CachedTokens-r.HostCachedTokens {
			t.Fatalf("request %d: first %v finished %v computed %d", r.ID, r.FirstToken, r.Finished, r.ComputedTokens)
		}
	}
	if e.UsedBlocks() != 0 {
		t.Fatalf("%d blocks still referenced", e.UsedBlocks())
	}
}

func TestEngineRandomOps(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	n := 300
	if raceEnabled {
		n = 60
	}
	for range n {
		data := make([]byte, 5+rng.IntN(300))
		for i := range data {
			data[i] = byte(rng.IntN(256))
		}
		checkEngineOps(t, data)
	}
}

func FuzzEngine(f *testing.F) {
	f.Add([]byte{0, 10, 5, 3, 20, 1, 2, 3, 0, 1, 4, 5, 0, 0, 2, 2, 2})
	f.Add([]byte{1, 3, 0, 7, 63, 5, 255, 255, 6, 0, 0, 0, 9, 9, 9, 0})
	f.Add([]byte{0, 0, 23, 0, 0, 2, 5, 1, 3, 5, 1, 0, 2, 5, 2, 0, 0, 0})
	f.Fuzz(checkEngineOps)
}
