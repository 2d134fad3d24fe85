package jinja

// MemoReplayed counts the iterations next took from prev unchanged (for
// tests: a replayed iteration is the same record in both).
func MemoReplayed(next, prev *LoopMemo) int {
	if next == nil || prev == nil {
		return 0
	}
	n := 0
	for node, lm := range next.loops {
		p := prev.loops[node]
		if p == nil {
			continue
		}
		for i := range min(len(lm.iters), len(p.iters)) {
			if lm.iters[i].ok && lm.iters[i].replayed {
				n++
			}
		}
	}
	return n
}
