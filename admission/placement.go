package admission

import "sort"

// Item is one paused program offered to a Placement: Size is its token total
// plus the per-program buffer. Items arrive in resume priority order (see
// the package documentation).
type Item struct {
	Size int64
}

// Bin is one worker with room under the resume ceiling.
type Bin struct {
	Worker WorkerID
	// Free is the room left under the resume ceiling, in tokens.
	Free int64
	// Capacity is the worker's KV capacity, Used its current (possibly
	// decayed) load; LeastLoaded ranks bins by (Capacity−Free)/Capacity.
	Capacity int64
}

// Placement decides which paused programs resume on which worker. Place
// writes into dst[i] the index in bins of the bin item i goes to, or −1 to
// leave it paused; len(dst) == len(items). Place may modify bins (it is
// scratch owned by the caller for the duration of the call) and must not
// keep any of its arguments. The controller checks every assignment against
// the bins' room and ignores (and counts, Stats.PlacementRejects) any that
// does not fit.
type Placement interface {
	Place(items []Item, bins []Bin, dst []int)
}

// PlacementFunc adapts a function to Placement.
type PlacementFunc func(items []Item, bins []Bin, dst []int)

// Place calls f.
func (f PlacementFunc) Place(items []Item, bins []Bin, dst []int) { f(items, bins, dst) }

// The built-in policies. Each is stateless and safe for concurrent use.
var (
	// WorstFit is what ThunderAgent (and Dynamo's port) actually run,
	// although upstream calls it best-fit decreasing: take programs in
	// priority order while their total fits the total free room, then place
	// them largest first, each on the worker with the most free room,
	// skipping those that do not fit. Spreads load evenly.
	WorstFit Placement = PlacementFunc(worstFit)
	// BestFitDecreasing selects programs as WorstFit does, then places them
	// largest first, each on the worker with the least free room that still
	// fits it. Packs tightly, leaving whole workers free for big programs.
	BestFitDecreasing Placement = PlacementFunc(bestFitDecreasing)
	// LeastLoaded places programs in priority order (smallest first), each
	// on the worker with the lowest utilisation (counting programs already
	// placed in this round) that fits it. No selection step: a program that
	// fits nowhere is skipped and later ones are still tried.
	LeastLoaded Placement = PlacementFunc(leastLoaded)
)

// selectAndOrder does upstream's selection step (priority order, keep an item
// while the cumulative size fits the total free room) and returns the chosen
// item indices sorted by decreasing size (ties: priority order).
func selectAndOrder(items []Item, bins []Bin, dst []int) []int {
	var total int64
	for _, b := range bins {
		total += b.Free
	}
	for i := range dst {
		dst[i] = -1
	}
	sel := make([]int, 0, len(items))
	var cum int64
	for i, it := range items {
		if cum+it.Size <= total {
			sel = append(sel, i)
			cum += it.Size
		}
	}
	sort.SliceStable(sel, func(a, b int) bool { return items[sel[a]].Size > items[sel[b]].Size })
	return sel
}

func worstFit(items []Item, bins []Bin, dst []int) {
	sel := selectAndOrder(items, bins, dst)
	if len(sel) == 0 {
		return
	}
	minSize := items[sel[len(sel)-1]].Size
	for _, i := range sel {
		best := -1
		for j := range bins {
			if best < 0 || bins[j].Free > bins[best].Free {
				best = j
			}
		}
		if best < 0 || minSize > bins[best].Free {
			return // nothing left fits anywhere
		}
		if items[i].Size > bins[best].Free {
			continue
		}
		dst[i] = best
		bins[best].Free -= items[i].Size
	}
}

func bestFitDecreasing(items []Item, bins []Bin, dst []int) {
	sel := selectAndOrder(items, bins, dst)
	for _, i := range sel {
		best := -1
		for j := range bins {
			if bins[j].Free >= items[i].Size && (best < 0 || bins[j].Free < bins[best].Free) {
				best = j
			}
		}
		if best >= 0 {
			dst[i] = best
			bins[best].Free -= items[i].Size
		}
	}
}

func leastLoaded(items []Item, bins []Bin, dst []int) {
	for i := range dst {
		dst[i] = -1
	}
	for i, it := range items {
		best := -1
		var bestU float64
		for j := range bins {
			if bins[j].Free < it.Size || bins[j].Capacity <= 0 {
				continue
			}
			u := float64(bins[j].Capacity-bins[j].Free) / float64(bins[j].Capacity)
			if best < 0 || u < bestU {
				best, bestU = j, u
			}
		}
		if best >= 0 {
			dst[i] = best
			bins[best].Free -= it.Size
		}
	}
}
