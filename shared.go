package agentkv

import (
	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/sharedpool"
)

// This file credits workers with the shared KV pool's pages (sharedpool)
// beyond what they hold themselves.

// sharedHits queries the shared pool for the request's pages and returns
// the hits (nil when there is no pool, no tokens, no layout yet, or a
// layout whose page size is not the router's block size: its pages would
// never line up with the blocks, so that is logged rather than credited).
func (r *Router) sharedHits(tokens []uint32) *sharedpool.Hits {
	if r.cfg.SharedPool == nil || len(tokens) == 0 {
		return nil
	}
	l, err := r.cfg.SharedPool.Layout()
	if err == nil {
		err = l.CheckPageSize(r.cfg.BlockSize)
	}
	if err != nil {
		r.log.Debug("agentkv: no shared-pool credit", "err", err)
		return nil
	}
	h, err := r.cfg.SharedPool.Query(sharedpool.PageHashes(tokens, l.PageSize, l.Eagle, nil))
	if err != nil {
		r.log.Debug("agentkv: shared pool query failed", "err", err)
		return nil
	}
	return &h
}

// sharedBlocks is the shared-pool credit of a worker: pages (one per block)
// beyond everything the worker holds on device, host and disk.
func sharedBlocks(h *sharedpool.Hits, m flashindex.Match) int {
	if h == nil {
		return 0
	}
	return h.SharedBeyondTiers(m.Device, m.Host, m.Disk)
}
