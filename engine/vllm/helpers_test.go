package vllm

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/agentkv/agentkv/flashindex"
)

// norm is a deep copy of an emitted event, comparable with ==-like helpers.
type norm struct {
	Worker    flashindex.Worker
	EventID   uint64
	Kind      flashindex.EventKind
	Tier      flashindex.Tier
	Parent    uint64
	HasParent bool
	Hashes    []uint64 // engine hashes of Blocks (Stored) or Hashes (Removed)
	Tokens    [][]uint32
	Extra     [][]uint64
	BlockSize int
	LoRA      string
}

func copyEvent(ev *flashindex.Event) norm {
	n := norm{Worker: ev.Worker, EventID: ev.EventID, Kind: ev.Kind, Tier: ev.Tier,
		Parent: ev.Parent, HasParent: ev.HasParent, BlockSize: ev.BlockSize, LoRA: ev.LoRA}
	switch ev.Kind {
	case flashindex.Stored:
		for _, b := range ev.Blocks {
			n.Hashes = append(n.Hashes, b.EngineHash)
			n.Tokens = append(n.Tokens, slices.Clone(b.Tokens))
			n.Extra = append(n.Extra, slices.Clone(b.ExtraKeys))
		}
	case flashindex.Removed:
		n.Hashes = slices.Clone(ev.Hashes)
	}
	return n
}

func (n norm) String() string {
	return fmt.Sprintf("{%v id=%d %v tier=%v parent=%x/%v hashes=%x tokens=%v bs=%d lora=%q}",
		n.Worker, n.EventID, n.Kind, n.Tier, n.Parent, n.HasParent, n.Hashes, n.Tokens, n.BlockSize, n.LoRA)
}

func equalNorm(a, b norm) bool {
	if a.Worker != b.Worker || a.EventID != b.EventID || a.Kind != b.Kind || a.Tier != b.Tier ||
		a.Parent != b.Parent || a.HasParent != b.HasParent || a.BlockSize != b.BlockSize || a.LoRA != b.LoRA {
		return false
	}
	if !slices.Equal(a.Hashes, b.Hashes) || len(a.Tokens) != len(b.Tokens) {
		return false
	}
	for i := range a.Tokens {
		if !slices.Equal(a.Tokens[i], b.Tokens[i]) {
			return false
		}
	}
	return true
}

// want is the reference model of decoding: what a WireEvent must become.
func want(ev WireEvent) norm {
	n := norm{Kind: ev.Kind}
	if ev.Kind == flashindex.Cleared {
		return n
	}
	t, ok := flashindex.TierFromMedium(ev.Medium)
	if !ok {
		panic("want: unknown medium " + ev.Medium)
	}
	n.Tier = t
	n.Hashes = slices.Clone(ev.Hashes)
	if ev.Kind == flashindex.Removed {
		return n
	}
	n.Parent, n.HasParent = ev.Parent, ev.HasParent
	n.BlockSize = ev.BlockSize
	for i := range ev.Hashes {
		n.Tokens = append(n.Tokens, slices.Clone(ev.Tokens[i*ev.BlockSize:(i+1)*ev.BlockSize]))
	}
	switch {
	case ev.LoRAName != "":
		n.LoRA = ev.LoRAName
	case ev.HasLoRAID:
		n.LoRA = fmt.Sprintf("lora_id:%d", ev.LoRAID)
	}
	return n
}

var mediums = []string{"", "GPU", "DEVICE", "CPU_PINNED", "CPU_TIER1", "CPU_TIER2", "DISK", "NVME", "EXTERNAL", "SHARED"}

// randHash draws hashes that exercise every msgpack integer width and sign.
func randHash(r *rand.Rand) uint64 {
	switch r.IntN(5) {
	case 0:
		return uint64(r.IntN(128))
	case 1:
		return uint64(r.IntN(1 << 16))
	case 2:
		return uint64(-int64(r.IntN(1<<20) + 1)) // negative int64
	case 3:
		return r.Uint64() | 1<<63
	}
	return r.Uint64()
}

// randEvent draws a valid event.
func randEvent(r *rand.Rand) WireEvent {
	switch k := r.IntN(10); {
	case k == 0:
		return WireEvent{Kind: flashindex.Cleared}
	case k <= 3:
		ev := WireEvent{Kind: flashindex.Removed, Medium: mediums[r.IntN(len(mediums))]}
		for i := r.IntN(5) + 1; i > 0; i-- {
			ev.Hashes = append(ev.Hashes, randHash(r))
		}
		return ev
	}
	bs := []int{1, 4, 16, 64}[r.IntN(4)]
	ev := WireEvent{Kind: flashindex.Stored, BlockSize: bs, Medium: mediums[r.IntN(len(mediums))]}
	for i := r.IntN(4) + 1; i > 0; i-- {
		ev.Hashes = append(ev.Hashes, randHash(r))
		for j := 0; j < bs; j++ {
			ev.Tokens = append(ev.Tokens, uint32(r.IntN(200000)))
		}
	}
	if r.IntN(2) == 0 {
		ev.Parent, ev.HasParent = randHash(r), true
	}
	switch r.IntN(4) {
	case 0:
		ev.LoRAName = fmt.Sprintf("adapter-%d", r.IntN(3))
	case 1:
		ev.LoRAID, ev.HasLoRAID = int64(r.IntN(5)), true
	}
	if r.IntN(4) == 0 {
		ev.Group, ev.HasGroup = 0, true
	}
	return ev
}

func randEncoding(r *rand.Rand) Encoding {
	return Encoding{
		MapEvents:   r.IntN(2) == 0,
		MapBatch:    r.IntN(3) == 0,
		BytesHashes: r.IntN(2) == 0,
		DPRank:      0,
		HasDPRank:   r.IntN(2) == 0,
		Full:        r.IntN(2) == 0,
	}
}

func mustEncode(c Encoding, ts float64, events []WireEvent) []byte {
	b, err := c.Append(nil, ts, events)
	if err != nil {
		panic(err)
	}
	return b
}
