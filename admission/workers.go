package admission

import (
	"sort"
	"time"
)

// MaxTokens bounds every token count and capacity the controller accepts
// (2^40), so sums over many programs cannot overflow.
const MaxTokens = 1 << 40

// AddWorker adds a worker with a KV capacity in tokens.
func (c *RawAdmitter) AddWorker(id WorkerID, capacity int64) error {
	if capacity <= 0 || capacity > MaxTokens {
		return ErrBadCapacity
	}
	if _, ok := c.byID[id]; ok {
		return ErrWorkerExists
	}
	w := &worker{id: id, cap: capacity}
	c.byID[id] = w
	i := sort.Search(len(c.workers), func(i int) bool { return c.workers[i].id >= id })
	c.workers = append(c.workers, nil)
	copy(c.workers[i+1:], c.workers[i:])
	c.workers[i] = w
	c.refreshGrowth()
	return nil
}

// SetCapacity changes a worker's capacity; the next Tick acts on it.
func (c *RawAdmitter) SetCapacity(id WorkerID, capacity int64) error {
	if capacity <= 0 || capacity > MaxTokens {
		return ErrBadCapacity
	}
	w, ok := c.byID[id]
	if !ok {
		return ErrUnknownWorker
	}
	w.cap = capacity
	c.refreshGrowth()
	return nil
}

// SetBacklog records a worker's prefill backlog: the uncached prompt
// tokens of requests sent to it that have not produced their first token
// (a router's load accounting). With Moves, the resume pass places
// no program on a worker whose backlog is Moves.Margin or more while
// another worker has room: a turn placed there would queue behind that
// prefill. Unknown workers are ignored; negative values count as zero.
func (c *RawAdmitter) SetBacklog(id WorkerID, tokens int64) {
	if w, ok := c.byID[id]; ok {
		w.backlog = min(max(tokens, 0), MaxTokens)
	}
}

// SetEngineUsage records the KV a worker's engine reports in use, in
// tokens: its blocks held by requests (vLLM's kv_cache_usage_perc ×
// capacity), not those only cached. What of it the worker's Reasoning
// programs and shared prefixes do not account for, less 5 % of its
// capacity (decoding and block rounding run an engine a few percent over
// the token sums), is KV that admission does not see, such as traffic
// that bypasses it or prompts its estimates undercount: placement (the
// door, resumes, moves) counts it as used on top of the programs until
// the next report. Only that excess is kept, not the whole report, since
// a report is up to a poll old while the programs' weights change with
// every turn. Pause decisions count the programs only. Unknown workers
// are ignored; a negative value clears the report.
func (c *RawAdmitter) SetEngineUsage(id WorkerID, tokens int64) {
	w, ok := c.byID[id]
	if !ok {
		return
	}
	w.engine = min(max(tokens, 0), MaxTokens)
	known := float64(w.reasoning+w.sharedSum) + engineSlack*float64(w.cap)
	w.unmodelled = int64(max(float64(w.engine)-known, 0))
}

// engineSlack is the part of a worker's capacity by which its engine's
// report may exceed its programs' weight before placement counts the
// excess: tokens decoded since a turn started and block rounding run the
// engine a little over the token sums (up to 2.6 % of a worker in the
// simulated study), which the Buffer and the resume ceiling allow for.
const engineSlack = 0.05

// roomUsed is what placement counts as used on w, given the programs'
// weight u there: u plus the KV its engine last reported beyond them.
func roomUsed(w *worker, u float64) float64 {
	return u + float64(w.unmodelled)
}

// RemoveWorker removes a worker. Its programs are paused (reason
// ReasonWorkerRemoved) and those that fit on another worker under the
// resume ceiling are resumed there at once (the rest by later ticks), so
// a worker's death does not cost its sessions a tick's wait. Turns that
// were running on it stay in flight until the caller ends them with
// EndRequest; a retry is a new StartRequest, which runs where the program
// resumed, or is held until it does.
func (c *RawAdmitter) RemoveWorker(now time.Time, id WorkerID) error {
	w, ok := c.byID[id]
	if !ok {
		return ErrUnknownWorker
	}
	for len(w.progs) > 0 {
		p := w.progs[len(w.progs)-1]
		if p.marked {
			c.setMarked(p, false)
		}
		c.pause(now, p, ReasonWorkerRemoved)
	}
	delete(c.byID, id)
	i := sort.Search(len(c.workers), func(i int) bool { return c.workers[i].id >= id })
	c.workers = append(c.workers[:i], c.workers[i+1:]...)
	c.refreshGrowth()
	for _, p := range c.paused {
		if p.home == w {
			p.home = nil
		}
		if p.probe == w {
			p.probe = nil
		}
	}
	var r TickResult
	c.resume(now, &r)
	return nil
}

// Workers appends a snapshot of every worker, by id, to dst.
func (c *RawAdmitter) Workers(dst []WorkerInfo) []WorkerInfo {
	for _, w := range c.workers {
		dst = append(dst, WorkerInfo{
			ID: w.id, Capacity: w.cap, Used: c.used(w), Util: c.util(w),
			Marked: float64(w.marked), Programs: len(w.progs), Demoted: w.demoted,
			Reasoning: len(w.progs) - w.nAct, ActingN: w.nAct, Backlog: w.backlog, EngineUsed: w.engine,
		})
	}
	return dst
}

// Worker returns a snapshot of one worker.
func (c *RawAdmitter) Worker(id WorkerID) (WorkerInfo, bool) {
	w, ok := c.byID[id]
	if !ok {
		return WorkerInfo{}, false
	}
	return c.Workers(nil)[c.workerIndex(w)], true
}

func (c *RawAdmitter) workerIndex(w *worker) int {
	return sort.Search(len(c.workers), func(i int) bool { return c.workers[i].id >= w.id })
}

func (c *RawAdmitter) used(w *worker) float64 {
	return float64(w.reasoning) + c.cfg.ActingWeight*float64(w.acting) + float64(w.sharedSum) + float64(w.probing)
}

// sharedKey identifies a shared prefix: its key and its counted length.
type sharedKey struct {
	key uint64
	n   int64
}

func sharedOf(p *program) sharedKey {
	return sharedKey{p.sharedID, min(p.shared, p.tokens)}
}

// SetShared records that the leading shared tokens of program id's context
// are a prefix other programs share too (a system prompt and tools, a
// parent's context; the router's session-prefix index knows it), named by
// key (any value equal for every program sharing that prefix, such as the
// sequence hash of its last block). A worker counts each program's unique
// tail, tokens − shared, plus each distinct shared prefix of its programs
// once, since its cache holds one copy. The value stays until the next
// call; shared 0 (the default) counts the whole context.
func (c *RawAdmitter) SetShared(id string, shared int64, key uint64) error {
	p, err := c.prefixOf(id, shared)
	if err != nil {
		return err
	}
	w := p.w
	if w != nil {
		c.detach(p)
	}
	p.shared, p.sharedID = shared, key
	if w != nil {
		c.attach(p, w)
	}
	return nil
}

// prefixOf checks a prefix length given for program id (SetShared,
// SetFirstPrefix) and returns the program.
func (c *RawAdmitter) prefixOf(id string, shared int64) (*program, error) {
	if shared < 0 || shared > MaxTokens {
		return nil, ErrBadTokens
	}
	p, ok := c.progs[id]
	if !ok {
		return nil, ErrUnknownProgram
	}
	return p, nil
}

func (w *worker) addShared(k sharedKey) {
	if k.n <= 0 {
		return
	}
	if w.sharedN == nil {
		w.sharedN = map[sharedKey]int{}
	}
	if w.sharedN[k]++; w.sharedN[k] == 1 {
		w.sharedSum += k.n
	}
}

func (w *worker) dropShared(k sharedKey) {
	if k.n <= 0 {
		return
	}
	if w.sharedN[k]--; w.sharedN[k] > 0 {
		return
	}
	delete(w.sharedN, k)
	w.sharedSum -= k.n
}

func (c *RawAdmitter) util(w *worker) float64 {
	return c.used(w) / float64(w.cap)
}

func (c *RawAdmitter) weight(p *program) float64 {
	if p.phase == Acting {
		return c.cfg.ActingWeight * float64(tail(p))
	}
	return float64(tail(p))
}
