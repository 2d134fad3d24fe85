package sharedpool

// Range is a half-open range [Start, End) of page indices of a request.
type Range struct {
	Start, End int
}

// Len returns End - Start.
func (r Range) Len() int { return r.End - r.Start }

// Hits are the pages of one request found complete in the shared pool.
//
// Ranges are sorted, disjoint and never adjacent (adjacent hits merge), and
// Total is the sum of their lengths. A Hits owns its Ranges slice; QueryInto
// reuses it, so copy Ranges before querying again into the same Hits if
// they must be kept.
type Hits struct {
	Pages  int // pages in the request
	Total  int
	Ranges []Range
}

// Beyond returns how many hit pages lie at or after page index pos:
// |hits ∩ [pos, Pages)|. Negative pos counts every hit.
func (h *Hits) Beyond(pos int) int {
	n := 0
	for _, r := range h.Ranges {
		switch {
		case r.End <= pos:
		case r.Start >= pos:
			n += r.End - r.Start
		default:
			n += r.End - pos
		}
	}
	return n
}

// SharedBeyondDevice is the shared-pool credit of a worker whose device
// prefix covers the first device pages: |hits ∩ [device, Pages)|. This is
// what Dynamo's selector credits (hits_beyond(device_blocks)). A worker's
// host and disk hits lie beyond its device prefix too, so with this credit
// they are counted twice: once at the host/disk weight and again as shared.
// [Hits.SharedBeyondTiers] avoids that.
func (h *Hits) SharedBeyondDevice(device int) int { return h.Beyond(device) }

// SharedBeyondTiers credits only shared pages beyond everything the worker
// holds itself: |hits ∩ [device+host+disk, Pages)|, with host and disk the
// worker's exclusive tier depths (host continuing from device, disk from
// host). A page the worker can load from its own host or disk tier is
// credited there, never again as shared.
func (h *Hits) SharedBeyondTiers(device, host, disk int) int {
	return h.Beyond(device + host + disk)
}

// RunFrom returns the length of the run of consecutive hit pages starting
// exactly at pos; 0 if page pos is a miss. SGLang's HiCache prefetch reads
// storage pages in order and stops at the first missing one, so this is the
// part of a shared hit an engine can actually load after its own prefix —
// a stricter credit than Beyond.
func (h *Hits) RunFrom(pos int) int {
	for _, r := range h.Ranges {
		if r.Start <= pos && pos < r.End {
			return r.End - pos
		}
	}
	return 0
}

// Contains reports whether page index i is a hit.
func (h *Hits) Contains(i int) bool { return h.RunFrom(i) > 0 }
