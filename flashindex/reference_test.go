package flashindex

import (
	"slices"
	"time"
)

// refModel is the naive reference the Index is checked against: maps of
// sets, no nodes, no runs, no sharing. It implements the documented
// semantics directly and slowly.
type refModel struct {
	blockSize int
	maxBlocks int
	approxMax int
	now       func() time.Time

	workers   map[Worker]*refWorker
	approx    map[refKey]*refApprox
	approxSeq uint64

	applied        uint64
	rejected       Rejections
	duplicates     uint64
	gaps           uint64
	unknownRemoved uint64
	expired        uint64
	pruned         uint64
}

type refKey struct {
	w   Worker
	seq uint64
}

type refApprox struct {
	expiry int64
	order  uint64
}

type refWorker struct {
	engine [3]map[uint64]uint64 // per tier: engine hash -> sequence hash
	lastID uint64
	seen   bool
	gaps   uint64
}

func newRef(cfg Config) *refModel {
	m := &refModel{blockSize: cfg.BlockSize, maxBlocks: cfg.MaxBlocksPerWorker, approxMax: cfg.ApproxMaxEntries, now: cfg.Now,
		workers: map[Worker]*refWorker{}, approx: map[refKey]*refApprox{}}
	if m.approxMax == 0 {
		m.approxMax = DefaultApproxMaxEntries
	}
	return m
}

func (m *refModel) worker(w Worker) *refWorker {
	rw := m.workers[w]
	if rw == nil {
		rw = &refWorker{}
		for i := range rw.engine {
			rw.engine[i] = map[uint64]uint64{}
		}
		m.workers[w] = rw
	}
	return rw
}

// resident reports whether w holds seq on tier t (from events).
func (m *refModel) resident(w Worker, t int, seq uint64) bool {
	rw := m.workers[w]
	if rw == nil {
		return false
	}
	for _, s := range rw.engine[t] {
		if s == seq {
			return true
		}
	}
	return false
}

func (m *refModel) distinct(rw *refWorker, t int) int {
	set := map[uint64]bool{}
	for _, s := range rw.engine[t] {
		set[s] = true
	}
	return len(set)
}

func (m *refModel) expire() {
	t := m.now().UnixNano()
	for k, a := range m.approx {
		if a.expiry <= t {
			delete(m.approx, k)
			m.expired++
		}
	}
}

// apply mirrors Index.Apply and returns whether it rejected the event and,
// if it saw one, the gap.
func (m *refModel) apply(ev *Event) (rejected bool, gap *Gap) {
	if ev == nil {
		m.rejected.Malformed++
		return true, nil
	}
	m.expire()
	rw := m.worker(ev.Worker)
	if rw.seen && ev.EventID <= rw.lastID {
		m.duplicates++
		return false, nil
	}
	if rw.seen && ev.EventID != rw.lastID+1 {
		gap = &Gap{Worker: ev.Worker, Expected: rw.lastID + 1, Got: ev.EventID}
		rw.gaps++
		m.gaps++
	}
	rw.seen, rw.lastID = true, ev.EventID
	ok := false
	switch ev.Kind {
	case Stored:
		ok = m.stored(rw, ev)
	case Removed:
		if ev.Tier > Disk {
			m.rejected.Tier++
			break
		}
		for _, e := range ev.Hashes {
			if _, has := rw.engine[ev.Tier][e]; has {
				delete(rw.engine[ev.Tier], e)
			} else {
				m.unknownRemoved++
			}
		}
		ok = true
	case Cleared:
		for w, o := range m.workers {
			if w.ID != ev.Worker.ID {
				continue
			}
			for i := range o.engine {
				o.engine[i] = map[uint64]uint64{}
			}
			for k := range m.approx {
				if k.w == w {
					delete(m.approx, k)
				}
			}
		}
		ok = true
	default:
		m.rejected.Kind++
	}
	if ok {
		m.applied++
	}
	return !ok, gap
}

func (m *refModel) stored(rw *refWorker, ev *Event) bool {
	if ev.Tier > Disk {
		m.rejected.Tier++
		return false
	}
	t := int(ev.Tier)
	if ev.BlockSize != 0 && ev.BlockSize != m.blockSize {
		m.rejected.BlockSize++
		return false
	}
	var prev uint64
	has := false
	if ev.HasParent {
		s, ok := rw.engine[t][ev.Parent]
		for p := 0; p < 3 && !ok; p++ {
			s, ok = rw.engine[p][ev.Parent]
		}
		if !ok {
			m.rejected.UnknownParent++
			return false
		}
		prev, has = s, true
	}
	h, _ := NewHasher(m.blockSize, ev.LoRA)
	seqs := make([]uint64, len(ev.Blocks))
	for i, b := range ev.Blocks {
		local := b.LocalHash
		if !b.HasLocalHash {
			if len(b.Tokens) == 0 {
				m.rejected.Malformed++
				return false
			}
			if len(b.Tokens) != m.blockSize {
				m.rejected.BlockSize++
				return false
			}
			var err error
			if local, err = h.LocalHashExtra(b.Tokens, b.ExtraKeys); err != nil {
				m.rejected.Malformed++
				return false
			}
		}
		if has {
			prev = NextSequenceHash(prev, local)
		} else {
			prev, has = local, true
		}
		seqs[i] = prev
		if s, ok := rw.engine[t][b.EngineHash]; ok && s != prev {
			m.rejected.Conflict++
			return false
		}
		for j := 0; j < i; j++ {
			if ev.Blocks[j].EngineHash == b.EngineHash && seqs[j] != prev {
				m.rejected.Conflict++
				return false
			}
		}
	}
	w := ev.Worker
	added := 0
	seen := map[uint64]bool{}
	for i, b := range ev.Blocks {
		if _, ok := rw.engine[t][b.EngineHash]; ok || seen[b.EngineHash] {
			continue
		}
		seen[b.EngineHash] = true
		if !m.resident(w, t, seqs[i]) {
			added++
		}
	}
	if m.maxBlocks > 0 && added > 0 {
		total := 0
		for p := 0; p < 3; p++ {
			total += m.distinct(rw, p)
		}
		if total+added > m.maxBlocks {
			m.rejected.Capacity++
			return false
		}
	}
	for i, b := range ev.Blocks {
		if _, ok := rw.engine[t][b.EngineHash]; !ok {
			rw.engine[t][b.EngineHash] = seqs[i]
		}
		if t == int(Device) {
			delete(m.approx, refKey{w, seqs[i]})
		}
	}
	return true
}

func (m *refModel) record(w Worker, seq []uint64, ttl time.Duration) {
	if len(seq) == 0 {
		return
	}
	if ttl <= 0 {
		ttl = DefaultApproxTTL
	}
	now := m.now()
	m.expire()
	m.worker(w)
	exp := now.Add(ttl).UnixNano()
	seen := map[uint64]bool{}
	for _, s := range seq {
		if seen[s] {
			continue
		}
		seen[s] = true
		if m.resident(w, int(Device), s) {
			continue
		}
		m.approx[refKey{w, s}] = &refApprox{expiry: exp, order: m.approxSeq}
		m.approxSeq++
	}
	for len(m.approx) > m.approxMax {
		var min refKey
		var best *refApprox
		for k, a := range m.approx {
			if best == nil || a.expiry < best.expiry || (a.expiry == best.expiry && a.order < best.order) {
				min, best = k, a
			}
		}
		delete(m.approx, min)
		m.pruned++
	}
}

func (m *refModel) removeWorker(w Worker) {
	if m.workers[w] == nil {
		return
	}
	delete(m.workers, w)
	for k := range m.approx {
		if k.w == w {
			delete(m.approx, k)
		}
	}
}

func (m *refModel) approxCount(w Worker) int {
	n := 0
	for k := range m.approx {
		if k.w == w {
			n++
		}
	}
	return n
}

// refView is the reference state as plain sets, built once per step.
type refView map[Worker]*refWorkerView

type refWorkerView struct {
	sets     [3]map[uint64]bool // device (events + approximate), host, disk
	resident int
}

func (m *refModel) view() refView {
	v := refView{}
	for w, rw := range m.workers {
		wv := &refWorkerView{sets: [3]map[uint64]bool{{}, {}, {}}}
		for p := 0; p < 3; p++ {
			for _, s := range rw.engine[p] {
				wv.sets[p][s] = true
			}
			wv.resident += len(wv.sets[p])
		}
		v[w] = wv
	}
	for k := range m.approx {
		v[k.w].sets[0][k.seq] = true
		v[k.w].resident++
	}
	return v
}

// find computes the exact matches, sorted by worker.
func (v refView) find(seq []uint64) []Match {
	var out []Match
	for w, wv := range v {
		i := 0
		var depth [3]int
		for p := 0; p < 3; p++ {
			for i < len(seq) && wv.sets[p][seq[i]] {
				depth[p]++
				i++
			}
		}
		if i > 0 {
			out = append(out, Match{Worker: w, Device: depth[0], Host: depth[1], Disk: depth[2], Resident: wv.resident})
		}
	}
	sortMatches(out)
	return out
}

func sortMatches(ms []Match) {
	slices.SortFunc(ms, func(a, b Match) int { return compareWorkers(a.Worker, b.Worker) })
}

func (m *refModel) stats() Stats {
	s := Stats{Applied: m.applied, Rejected: m.rejected, Duplicates: m.duplicates, Gaps: m.gaps,
		UnknownRemoved: m.unknownRemoved, ApproxExpired: m.expired, ApproxPruned: m.pruned, Approx: len(m.approx)}
	for w, rw := range m.workers {
		ws := WorkerStats{Worker: w, Device: m.distinct(rw, 0), Host: m.distinct(rw, 1), Disk: m.distinct(rw, 2),
			Approx: m.approxCount(w), LastEventID: rw.lastID, Gaps: rw.gaps}
		s.Residencies += ws.Device + ws.Host + ws.Disk
		s.Workers = append(s.Workers, ws)
	}
	slices.SortFunc(s.Workers, func(a, b WorkerStats) int { return compareWorkers(a.Worker, b.Worker) })
	return s
}
