package kvhint

import "time"

// Built-in policies. Each is immutable after New and safe for concurrent
// Evaluate calls. Each emits only hints that pass Validate with the default
// Bounds once Batcher has named them.

// DefaultChunkBlocks is the default number of block hashes per action for
// policies that split long targets.
const DefaultChunkBlocks = 4096

func checkChunk(name string, v *int, def int) error {
	if *v < 0 || *v > DefaultMaxBlocks {
		return configErr("%s: MaxBlocks %d outside [0, %d]", name, *v, DefaultMaxBlocks)
	}
	if *v == 0 {
		*v = def
	}
	return nil
}

// TailOffloadConfig configures TailOffload. Zero fields mean the defaults.
type TailOffloadConfig struct {
	// After is how long a session must have been ACTING before its unique
	// tail is demoted. Default 30s.
	After time.Duration
	// Dest is the demotion tier: host, disk or external. Default host.
	Dest Tier
	// PrefetchTo is where blocks found on colder tiers are prefetched to
	// when the session's next turn is admitted or it is resumed: device or
	// host. Default device.
	PrefetchTo Tier
	// MinBlocks is the fewest blocks worth a hint. Default 1.
	MinBlocks int
	// MaxBlocks is the most block hashes per action; longer targets are
	// split into several actions. Default DefaultChunkBlocks.
	MaxBlocks int
}

// TailOffload demotes a session's unique tail to a colder tier while the
// session is ACTING (a tool call) for longer than After, and prefetches
// whatever the selected worker holds of the request prefix on colder tiers
// back to PrefetchTo when the session's next turn is admitted or it is
// resumed. The shared prefix is never demoted: other sessions use it.
//
// Demotion (any event but admit/resume, session not finished) goes to
// Session.Worker. When Input.Cached is non-nil and Input.Prefix is the
// session's chain, only the part of the unique tail still on that worker's
// device is named (so a tick after a demotion emits nothing); otherwise the
// whole unique tail is.
//
// A TailOffload is immutable and safe for concurrent use.
type TailOffload struct{ cfg TailOffloadConfig }

// NewTailOffload validates cfg and returns the policy.
func NewTailOffload(cfg TailOffloadConfig) (*TailOffload, error) {
	if cfg.After < 0 || cfg.MinBlocks < 0 {
		return nil, configErr("tail offload: negative After or MinBlocks")
	}
	if cfg.After == 0 {
		cfg.After = 30 * time.Second
	}
	switch cfg.Dest {
	case TierNone:
		cfg.Dest = TierHost
	case TierHost, TierDisk, TierExternal:
	default:
		return nil, configErr("tail offload: Dest %v is not host, disk or external", cfg.Dest)
	}
	switch cfg.PrefetchTo {
	case TierNone:
		cfg.PrefetchTo = TierDevice
	case TierDevice, TierHost:
	default:
		return nil, configErr("tail offload: PrefetchTo %v is not device or host", cfg.PrefetchTo)
	}
	if cfg.MinBlocks == 0 {
		cfg.MinBlocks = 1
	}
	if err := checkChunk("tail offload", &cfg.MaxBlocks, DefaultChunkBlocks); err != nil {
		return nil, err
	}
	return &TailOffload{cfg: cfg}, nil
}

// Evaluate implements Policy.
func (p *TailOffload) Evaluate(dst []Hint, in *Input) []Hint {
	s := &in.Session
	if s.Finished {
		return dst
	}
	if in.Event == EventAdmit || in.Event == EventResume {
		r := in.residency(in.Worker)
		if r == nil {
			return dst
		}
		// Blocks colder than PrefetchTo: host and disk for device, disk
		// for host.
		start := r.Device
		if p.cfg.PrefetchTo == TierHost {
			start += r.Host
		}
		end := min(r.Device+r.Host+r.Disk, len(in.Prefix))
		if start < 0 || end-start < p.cfg.MinBlocks {
			return dst
		}
		proto := Action{Kind: KindPrefetch, SessionID: s.ID, Dest: p.cfg.PrefetchTo}
		return appendChunked(dst, in.Worker, proto, in.Prefix[start:end], p.cfg.MaxBlocks)
	}
	if s.Phase != PhaseActing || s.Acting < p.cfg.After || len(s.Unique) == 0 {
		return dst
	}
	tail := s.Unique
	if in.Cached != nil && chainAligned(in) {
		onDevice := 0
		if r := in.residency(s.Worker); r != nil {
			onDevice = min(r.Device, len(in.Prefix)) - len(s.Shared)
		}
		if onDevice <= 0 {
			return dst
		}
		tail = tail[:min(onDevice, len(tail))]
	}
	if len(tail) < p.cfg.MinBlocks {
		return dst
	}
	proto := Action{Kind: KindDemote, SessionID: s.ID, Dest: p.cfg.Dest}
	return appendChunked(dst, s.Worker, proto, tail, p.cfg.MaxBlocks)
}

// chainAligned reports whether in.Prefix is (at least the start of) the
// session's chain through its first unique block.
func chainAligned(in *Input) bool {
	s := &in.Session
	n := len(s.Shared)
	if len(s.Unique) == 0 || len(in.Prefix) <= n || in.Prefix[n] != s.Unique[0] {
		return false
	}
	return n == 0 || in.Prefix[0] == s.Shared[0]
}

// PrefixPinConfig configures PrefixPin. Zero fields mean the defaults.
type PrefixPinConfig struct {
	// MinSessions is how many live sessions must reference a block for it
	// to be pinned. Default 4.
	MinSessions int32
	// MinBlocks is the shortest prefix worth pinning. Default 1.
	MinBlocks int
	// MaxBlocks caps the pinned prefix (root-most blocks kept). Default
	// DefaultChunkBlocks.
	MaxBlocks int
	// TTL is the lease; admitted turns renew it (with Input.Renewals at
	// most every TTL/4, see PrefixPin). Default 5m.
	TTL time.Duration
}

// PrefixPin pins, on the selected worker, the leading blocks of a session's
// shared prefix that at least MinSessions live sessions reference: a system
// prompt or a common agent scaffold. It fires on EventAdmit and EventResume,
// so the lease is renewed while sessions keep using the prefix and lapses
// after TTL when they stop.
//
// With Input.Renewals (a router's memory of what it sent), a renewal is sent
// at most every TTL/4 per worker and pinned prefix: a turn that comes sooner
// after the last pin of the same blocks on the same worker sends none (the
// lease still has more than 3/4 of its TTL to run), where otherwise every
// turn of every session sharing a system prompt would re-pin it. That holds
// only while the index shows the worker holding the whole prefix on device
// (Input.Cached), so a pin that reached a worker before its blocks did, or
// one whose blocks the worker has lost since, is sent again on the next
// turn.
//
// A PrefixPin is immutable and safe for concurrent use.
type PrefixPin struct{ cfg PrefixPinConfig }

// NewPrefixPin validates cfg and returns the policy.
func NewPrefixPin(cfg PrefixPinConfig) (*PrefixPin, error) {
	if cfg.MinSessions < 0 || cfg.MinBlocks < 0 || cfg.TTL < 0 {
		return nil, configErr("prefix pin: negative field")
	}
	if cfg.MinSessions == 0 {
		cfg.MinSessions = 4
	}
	if cfg.MinBlocks == 0 {
		cfg.MinBlocks = 1
	}
	if cfg.TTL == 0 {
		cfg.TTL = 5 * time.Minute
	}
	if cfg.TTL < DefaultMinTTL || cfg.TTL > DefaultMaxTTL {
		return nil, configErr("prefix pin: TTL %v outside [%v, %v]", cfg.TTL, DefaultMinTTL, DefaultMaxTTL)
	}
	if err := checkChunk("prefix pin", &cfg.MaxBlocks, DefaultChunkBlocks); err != nil {
		return nil, err
	}
	return &PrefixPin{cfg: cfg}, nil
}

// Evaluate implements Policy.
func (p *PrefixPin) Evaluate(dst []Hint, in *Input) []Hint {
	if in.Event != EventAdmit && in.Event != EventResume {
		return dst
	}
	s := &in.Session
	n := 0
	for n < len(s.Shared) && n < len(s.SharedRefs) && s.SharedRefs[n] >= p.cfg.MinSessions {
		n++
	}
	n = min(n, p.cfg.MaxBlocks)
	if n < p.cfg.MinBlocks {
		return dst
	}
	held := false
	if r := in.residency(in.Worker); r != nil && r.Device >= n {
		held = true
	}
	if !in.Renewals.Due(RenewalKey{Kind: KindPin, Worker: in.Worker, Last: s.Shared[n-1], Blocks: n}, in.Now, p.cfg.TTL/4, held) {
		return dst
	}
	return append(dst, Hint{Worker: in.Worker, Action: Action{
		Kind: KindPin, SessionID: s.ID, TTL: p.cfg.TTL,
		Target: Target{Blocks: s.Shared[:n:n]},
	}})
}

// PeerShareConfig configures PeerShare. Zero fields mean the defaults.
type PeerShareConfig struct {
	// MinGain is how many more prefix blocks a source must hold than the
	// selected worker already has (device + host). Default 1.
	MinGain int
	// MaxSources is how many sources to name, best first. Default 1.
	MaxSources int
	// SourceHost counts a source's host-tier blocks as servable, not only
	// its device blocks.
	SourceHost bool
	// MaxBlocks caps the shared prefix. Default DefaultMaxBlocks.
	MaxBlocks int
}

// PeerShare names the best source when the selected worker lacks a prefix
// that another worker holds: on EventAdmit and EventResume it compares the
// selected worker's depth (device + host) with every other worker that has
// a control endpoint, and if one holds at least MinGain more blocks, emits a
// Share for the selected worker targeting the root-aligned prefix the best
// source holds. Sources are ordered by depth, longest first, ties to the
// smaller WorkerID (as Dynamo's best_source does).
//
// A PeerShare is immutable and safe for concurrent use.
type PeerShare struct{ cfg PeerShareConfig }

// NewPeerShare validates cfg and returns the policy.
func NewPeerShare(cfg PeerShareConfig) (*PeerShare, error) {
	if cfg.MinGain < 0 {
		return nil, configErr("peer share: negative MinGain")
	}
	if cfg.MinGain == 0 {
		cfg.MinGain = 1
	}
	if cfg.MaxSources < 0 || cfg.MaxSources > DefaultMaxSources {
		return nil, configErr("peer share: MaxSources %d outside [0, %d]", cfg.MaxSources, DefaultMaxSources)
	}
	if cfg.MaxSources == 0 {
		cfg.MaxSources = 1
	}
	if err := checkChunk("peer share", &cfg.MaxBlocks, DefaultMaxBlocks); err != nil {
		return nil, err
	}
	return &PeerShare{cfg: cfg}, nil
}

type shareCand struct {
	r     *Residency
	depth int
}

// Evaluate implements Policy.
func (p *PeerShare) Evaluate(dst []Hint, in *Input) []Hint {
	if in.Event != EventAdmit && in.Event != EventResume {
		return dst
	}
	own := 0
	if r := in.residency(in.Worker); r != nil {
		own = min(r.Device+r.Host, len(in.Prefix))
	}
	var buf [DefaultMaxSources]shareCand
	top := buf[:0]
	for i := range in.Cached {
		c := &in.Cached[i]
		if c.Worker == in.Worker || c.Endpoint == "" {
			continue
		}
		depth := c.Device
		if p.cfg.SourceHost {
			depth += c.Host
		}
		depth = min(depth, len(in.Prefix))
		if depth < own+p.cfg.MinGain {
			continue
		}
		// Insert into the top-MaxSources list (depth desc, worker asc).
		j := len(top)
		for j > 0 && (top[j-1].depth < depth || top[j-1].depth == depth && c.Worker.Less(top[j-1].r.Worker)) {
			j--
		}
		if j >= p.cfg.MaxSources {
			continue
		}
		if len(top) < p.cfg.MaxSources {
			top = append(top, shareCand{})
		}
		copy(top[j+1:], top[j:len(top)-1])
		top[j] = shareCand{r: c, depth: depth}
	}
	if len(top) == 0 {
		return dst
	}
	n := min(top[0].depth, p.cfg.MaxBlocks)
	sources := in.sources(len(top))
	for i, c := range top {
		tier := TierDevice
		if c.depth > c.r.Device {
			tier = TierHost
		}
		sources[i] = Source{Worker: c.r.Worker, Endpoint: c.r.Endpoint, Tier: tier, Blocks: uint32(min(c.depth, n))}
	}
	return append(dst, Hint{Worker: in.Worker, Action: Action{
		Kind: KindShare, SessionID: in.Session.ID, Dest: TierDevice,
		Target: Target{Blocks: in.Prefix[:n:n]}, Sources: sources,
	}})
}

// FinishReleaseConfig configures FinishRelease. Zero fields mean the
// defaults.
type FinishReleaseConfig struct {
	// MaxBlocks is the most block hashes per action; longer targets are
	// split. Default DefaultChunkBlocks.
	MaxBlocks int
}

// FinishRelease releases, once a session is finished, every block that only
// it referenced: its unique tail, and the shared blocks whose reference
// count (SharedRefs) has dropped to 1 or less. Blocks on the chain of a live
// parent are never released. The hints go to Session.Worker and, when
// Input.Prefix is the session's chain, to every worker in Input.Cached that
// holds any released block.
//
// A FinishRelease is immutable and safe for concurrent use.
type FinishRelease struct{ cfg FinishReleaseConfig }

// NewFinishRelease validates cfg and returns the policy.
func NewFinishRelease(cfg FinishReleaseConfig) (*FinishRelease, error) {
	if err := checkChunk("finish release", &cfg.MaxBlocks, DefaultChunkBlocks); err != nil {
		return nil, err
	}
	return &FinishRelease{cfg: cfg}, nil
}

// Evaluate implements Policy.
func (p *FinishRelease) Evaluate(dst []Hint, in *Input) []Hint {
	s := &in.Session
	if !s.Finished {
		return dst
	}
	protect := 0
	if par := in.Parent; par != nil && !par.Finished {
		for protect < s.Len() && protect < par.Len() && s.Block(protect) == par.Block(protect) {
			protect++
		}
	}
	first := -1 // first releasable chain position
	for i := range s.Shared {
		if i >= protect && i < len(s.SharedRefs) && s.SharedRefs[i] <= 1 {
			first = i
			break
		}
	}
	var blocks []uint64
	if first < 0 {
		// Only the unique tail (alias it).
		from := max(0, protect-len(s.Shared))
		if from >= len(s.Unique) {
			return dst
		}
		blocks = s.Unique[from:len(s.Unique):len(s.Unique)]
		first = len(s.Shared) + from
	} else {
		blocks = make([]uint64, 0, s.Len()-first)
		for i := first; i < len(s.Shared); i++ {
			if i < len(s.SharedRefs) && s.SharedRefs[i] <= 1 {
				blocks = append(blocks, s.Shared[i])
			}
		}
		blocks = append(blocks, s.Unique[max(0, protect-len(s.Shared)):]...)
	}
	proto := Action{Kind: KindRelease, SessionID: s.ID}
	dst = appendChunked(dst, s.Worker, proto, blocks, p.cfg.MaxBlocks)
	if len(in.Prefix) == 0 || s.Len() == 0 || in.Prefix[0] != s.Block(0) {
		return dst
	}
	holds := func(c *Residency) bool { return c.Worker != s.Worker && c.Device+c.Host+c.Disk > first }
	for i := range in.Cached {
		c := &in.Cached[i]
		if !holds(c) {
			continue
		}
		dup := false // tolerate a worker listed twice
		for j := 0; j < i && !dup; j++ {
			dup = in.Cached[j].Worker == c.Worker && holds(&in.Cached[j])
		}
		if !dup {
			dst = appendChunked(dst, c.Worker, proto, blocks, p.cfg.MaxBlocks)
		}
	}
	return dst
}
