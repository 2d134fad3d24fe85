package flashindex

import (
	"math/bits"
	"slices"
	"sync"
)

// queryScratch is per-query working memory, pooled.
type queryScratch struct {
	live    []uint64 // 4 planes of W words: device, host, disk walkers; slots that matched
	devEnd  []int32  // per slot: where the device prefix ended
	hostEnd []int32  // per slot: where the host run ended
	end     []int32  // per slot: where the disk run ended
}

var scratchPool = sync.Pool{New: func() any { return new(queryScratch) }}

// FindMatches returns, for every worker with any overlap with the request
// seq (own sequence hashes from position 0, as AppendSequenceHashes makes
// them), its device, host and disk depths and resident count; see Match
// for the exact counting. Results are appended to dst[:0] and the extended
// slice returned, so a caller that passes the previous result back
// allocates nothing; the caller owns both. Workers come in no particular
// order. seq is not retained or modified.
//
// seq must be a chain (each hash the sequence hash of the previous one and
// a block), as every prompt's hashes are, and the walk relies on it twice:
// it enters index nodes only at their first block, which is where a chain's
// blocks can be found; and since equal sequence hashes at a position mean
// equal blocks at every position before it, it compares a request with a
// node at the node's last block, or binary-searches where it leaves the
// node, instead of comparing every block (Dynamo's positional indexer
// jumps ahead on the same property). For a chain the answer is exact. For
// a list of hashes that is not a chain it is unspecified (it may count
// blocks a worker does not hold) but well formed: each worker at most
// once, depths that sum to at most len(seq), and no panic.
//
// FindMatches takes no lock and may run concurrently with writers and other
// queries.
func (ix *Index) FindMatches(seq []uint64, dst []Match) []Match {
	return ix.find(seq, dst, false)
}

// FindMatchesEarlyExit is FindMatches that stops walking the request as
// soon as at most one worker still matches, at the end of the stretch of
// blocks being examined. Every other worker's depths are exact; the last
// one's are a prefix of its exact depths (enough to know it leads), as in
// Dynamo's early-exit lookup.
func (ix *Index) FindMatchesEarlyExit(seq []uint64, dst []Match) []Match {
	return ix.find(seq, dst, true)
}

// word returns word i of plane p of a residency set.
func word(b []uint64, i, p int) uint64 {
	if j := i*numPlanes + p; j < len(b) {
		return b[j]
	}
	return 0
}

func (ix *Index) find(seq []uint64, dst []Match, early bool) []Match {
	dst = dst[:0]
	if len(seq) == 0 {
		return dst
	}
	st := ix.slots.Load()
	W := st.words()
	if W == 0 {
		return dst
	}
	sc := scratchPool.Get().(*queryScratch)
	defer scratchPool.Put(sc)
	if cap(sc.live) < 4*W {
		sc.live = make([]uint64, 4*W)
	}
	live := sc.live[:4*W]
	clear(live)
	dev, host, disk, matched := live[:W], live[W:2*W], live[2*W:3*W], live[3*W:]
	if ns := len(st.workers); cap(sc.devEnd) < ns {
		sc.devEnd = make([]int32, ns)
		sc.hostEnd = make([]int32, ns)
		sc.end = make([]int32, ns)
	}
	devEnd, hostEnd, end := sc.devEnd[:len(st.workers)], sc.hostEnd[:len(st.workers)], sc.end[:len(st.workers)]

	// The walk records where each slot's tiers end; the matches are
	// written at the end in slot order, reading the workers and counters
	// sequentially.
	started := false
	walking := 0 // slots still walking
	pos := 0
walk:
	for pos < len(seq) {
		d := ix.nodes.heads.get(seq[pos])
		if d == nil || len(d.hashes) == 0 || d.hashes[0] != seq[pos] {
			break // the node changed under us; treat as the end of the match
		}
		// A query enters nodes at their start (see headMap).
		m := chainMatchLen(seq[pos:], d.hashes)
		for ri, o := 0, 0; o < m; ri++ {
			r := &d.runs[ri]
			p := pos + o
			switch {
			case !started:
				started = true
				b0 := d.bits0
				for i := 0; i < W; i++ {
					dw := word(b0, i, planeDevice) | word(b0, i, planeApprox)
					hw := word(b0, i, planeHost)
					kw := word(b0, i, planeDisk)
					mk := st.mask[i]
					dev[i] = dw & mk
					host[i] = hw &^ dw & mk
					disk[i] = kw &^ (dw | hw) & mk
					matched[i] = dev[i] | host[i] | disk[i]
					walking += bits.OnesCount64(matched[i])
					for x := host[i] | disk[i]; x != 0; x &= x - 1 {
						s := i<<6 | bits.TrailingZeros64(x)
						devEnd[s], hostEnd[s] = 0, 0
					}
				}
			case ri == 0:
				// First run of a node: compare the whole set.
				walking = 0
				b0 := d.bits0
				for i := 0; i < W; i++ {
					dw := word(b0, i, planeDevice) | word(b0, i, planeApprox)
					hw := word(b0, i, planeHost)
					kw := word(b0, i, planeDisk)
					dd := dev[i] &^ dw
					dev[i] &= dw
					h2 := host[i] | dd
					dh := h2 &^ hw
					host[i] = h2 & hw
					k2 := disk[i] | dh
					dk := k2 &^ kw
					disk[i] = k2 & kw
					walking += bits.OnesCount64(dev[i] | host[i] | disk[i])
					for x := dd; x != 0; x &= x - 1 {
						devEnd[i<<6|bits.TrailingZeros64(x)] = int32(p)
					}
					for x := dh; x != 0; x &= x - 1 {
						hostEnd[i<<6|bits.TrailingZeros64(x)] = int32(p)
					}
					for x := dk; x != 0; x &= x - 1 {
						end[i<<6|bits.TrailingZeros64(x)] = int32(p)
					}
				}
			default:
				// Later runs: only slots whose planes changed since the
				// previous run can change state.
				for _, c := range d.chg[d.runs[ri-1].cend:r.cend] {
					s := int(c >> 4)
					i := s >> 6
					if i >= W {
						continue // a slot newer than this query's table
					}
					bit := uint64(1) << (uint(s) & 63)
					switch {
					case dev[i]&bit != 0:
						if c&(1<<planeDevice|1<<planeApprox) != 0 {
							continue
						}
						dev[i] &^= bit
						devEnd[s] = int32(p)
						if c&(1<<planeHost) != 0 {
							host[i] |= bit
							continue
						}
						hostEnd[s] = int32(p)
					case host[i]&bit != 0:
						if c&(1<<planeHost) != 0 {
							continue
						}
						host[i] &^= bit
						hostEnd[s] = int32(p)
					case disk[i]&bit != 0:
					default:
						continue
					}
					// The slot leaves the host run (or is on disk already).
					if c&(1<<planeDisk) != 0 {
						disk[i] |= bit
						continue
					}
					disk[i] &^= bit
					end[s] = int32(p)
					walking--
				}
			}
			if walking == 0 {
				pos = p
				break walk
			}
			o = min(int(r.end), m)
			if early && walking <= 1 {
				pos += o
				break walk
			}
		}
		pos += m
	}
	// Close the walkers still live at pos, then write the matches.
	n := 0
	for i := 0; i < W; i++ {
		for x := dev[i]; x != 0; x &= x - 1 {
			s := i<<6 | bits.TrailingZeros64(x)
			devEnd[s], hostEnd[s], end[s] = int32(pos), int32(pos), int32(pos)
		}
		for x := host[i]; x != 0; x &= x - 1 {
			s := i<<6 | bits.TrailingZeros64(x)
			hostEnd[s], end[s] = int32(pos), int32(pos)
		}
		for x := disk[i]; x != 0; x &= x - 1 {
			end[i<<6|bits.TrailingZeros64(x)] = int32(pos)
		}
		n += bits.OnesCount64(matched[i])
	}
	dst = slices.Grow(dst, n)[:n]
	k := 0
	for i := 0; i < W; i++ {
		totals := &st.counts[i].total // the word's 64 slots
		for x := matched[i]; x != 0; x &= x - 1 {
			b := bits.TrailingZeros64(x)
			s := i<<6 | b
			d, h := int(devEnd[s]), int(hostEnd[s])
			// Field by field: a composite literal is built in a stack
			// temporary and copied with wide loads that straddle its
			// narrow stores (a store-forwarding stall per match).
			m := &dst[k]
			w := &st.workers[s]
			m.Worker.ID, m.Worker.DPRank = w.ID, w.DPRank
			m.Device, m.Host, m.Disk, m.Resident = d, h-d, int(end[s])-h, int(totals[b].Load())
			k++
		}
	}
	return dst
}

// chainMatchLen returns how many leading hashes a and b share, given that
// a[0] == b[0] and both are chains: in a chain, equal sequence hashes at
// position k mean equal blocks at every position up to k (up to a 64-bit
// hash collision, the same odds every block lookup already takes), so the
// positions where a and b agree form a prefix. The search narrows the
// boundary 8 ways a round: each round compares the last position of the
// stretch (a request that runs through the node ends there) and seven
// evenly spaced ones, whose loads do not depend on one another, so their
// cache misses overlap; a short final stretch is compared directly. For
// 1,024 blocks that is three rounds of misses, where comparing every block
// streams 16 KB and a binary search waits for ten misses in a row.
func chainMatchLen(a, b []uint64) int {
	n := min(len(a), len(b))
	lo, hi := 0, n // a[lo] == b[lo]; a[hi] != b[hi], or hi == n
	for hi-lo > 16 {
		step := (hi - lo) / 8
		c := 0
		for j := 1; j < 8; j++ {
			if i := lo + j*step; a[i] == b[i] {
				c++ // the equal probes are a prefix of the probes
			}
		}
		if a[hi-1] == b[hi-1] {
			return hi
		}
		next := hi
		if c < 7 {
			next = lo + (c+1)*step
		}
		lo, hi = lo+c*step, next
	}
	if n == 0 {
		return 0
	}
	return lo + 1 + matchLen(a[lo+1:hi], b[lo+1:hi])
}
