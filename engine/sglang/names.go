package sglang

import (
	"errors"
	"fmt"
	"sync"

	"github.com/agentkv/agentkv/flashindex"
)

// Names maps one SGLang worker's block names to the router's and back.
//
// SGLang names a block by the first 16 hex digits of its SHA-256 digest as
// a signed int64 (hash_str_to_int64); the router indexes blocks by its own
// XXH3 sequence hashes computed from the event's token ids. A KV hint must
// name blocks the way the engine does, or it covers nothing: Names keeps
// the engine-hash ↔ own-hash map of the blocks the worker's events say it
// holds, so the router can translate a hint's block hashes
// ([Names.EngineHashes]) and an engine's answer back ([Names.Own]).
//
// Feed it every event of the worker, in order, before or beside the index
// (Apply has flashindex's sink shape). A block is forgotten when its last
// tier removes it, and everything on Cleared. Names is safe for concurrent
// use.
type Names struct {
	blockSize int

	mu      sync.Mutex // guards the fields below
	hashers map[string]*flashindex.Hasher
	byEng   map[uint64]nameEntry // engine hash → own hash and tiers
	byOwn   map[uint64]uint64    // own hash → engine hash
}

type nameEntry struct {
	own   uint64
	tiers uint8 // bit per flashindex.Tier
}

// ErrUnknownParent reports a Stored event chained under a block Names does
// not know (an event was lost: resync the worker).
var ErrUnknownParent = errors.New("sglang: stored block's parent is not known")

// NewNames returns an empty map for a worker with blockSize-token blocks.
func NewNames(blockSize int) (*Names, error) {
	if _, err := flashindex.NewHasher(blockSize, ""); err != nil {
		return nil, fmt.Errorf("sglang: %w", err)
	}
	return &Names{blockSize: blockSize, hashers: map[string]*flashindex.Hasher{},
		byEng: map[uint64]nameEntry{}, byOwn: map[uint64]uint64{}}, nil
}

// Apply records one event. A Stored block without exactly BlockSize
// tokens, or under an unknown parent, is an error and changes nothing.
func (n *Names) Apply(ev *flashindex.Event) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch ev.Kind {
	case flashindex.Cleared:
		clear(n.byEng)
		clear(n.byOwn)
	case flashindex.Removed:
		bit := uint8(1) << ev.Tier
		for _, h := range ev.Hashes {
			e, ok := n.byEng[h]
			if !ok {
				continue
			}
			if e.tiers &^= bit; e.tiers == 0 {
				delete(n.byEng, h)
				if n.byOwn[e.own] == h {
					delete(n.byOwn, e.own)
				}
				continue
			}
			n.byEng[h] = e
		}
	case flashindex.Stored:
		h, err := n.hasher(ev.LoRA)
		if err != nil {
			return err
		}
		var parent uint64
		hasParent := ev.HasParent
		if hasParent {
			p, ok := n.byEng[ev.Parent]
			if !ok {
				return fmt.Errorf("%w: %d", ErrUnknownParent, int64(ev.Parent))
			}
			parent = p.own
		}
		owns := make([]uint64, len(ev.Blocks))
		for i := range ev.Blocks {
			b := &ev.Blocks[i]
			if len(b.Tokens) != n.blockSize {
				return fmt.Errorf("sglang: stored block %d has %d tokens, block size %d", i, len(b.Tokens), n.blockSize)
			}
			local, err := h.LocalHashExtra(b.Tokens, b.ExtraKeys)
			if err != nil {
				return fmt.Errorf("sglang: %w", err)
			}
			if hasParent {
				parent = flashindex.NextSequenceHash(parent, local)
			} else {
				parent, hasParent = local, true
			}
			owns[i] = parent
		}
		bit := uint8(1) << ev.Tier
		for i := range ev.Blocks {
			eh := ev.Blocks[i].EngineHash
			e := n.byEng[eh]
			e.own, e.tiers = owns[i], e.tiers|bit
			n.byEng[eh] = e
			n.byOwn[owns[i]] = eh
		}
	}
	return nil
}

func (n *Names) hasher(lora string) (*flashindex.Hasher, error) {
	if h := n.hashers[lora]; h != nil {
		return h, nil
	}
	h, err := flashindex.NewHasher(n.blockSize, lora)
	if err != nil {
		return nil, fmt.Errorf("sglang: %w", err)
	}
	n.hashers[lora] = h
	return h, nil
}

// Engine returns SGLang's name for the block the router calls own.
func (n *Names) Engine(own uint64) (uint64, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.byOwn[own]
	return e, ok
}

// Own returns the router's name for the block SGLang calls engine.
func (n *Names) Own(engine uint64) (uint64, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	e, ok := n.byEng[engine]
	return e.own, ok
}

// EngineHashes appends to dst SGLang's names for the router's block hashes
// own (root first), stopping at the first block the worker does not hold;
// it returns the extended slice and how many were translated. Put the
// result in a hint's block_hashes for an SGLang worker.
func (n *Names) EngineHashes(dst, own []uint64) ([]uint64, int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, h := range own {
		e, ok := n.byOwn[h]
		if !ok {
			return dst, i
		}
		dst = append(dst, e)
	}
	return dst, len(own)
}

// Len is the number of blocks known.
func (n *Names) Len() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.byEng)
}
