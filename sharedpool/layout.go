package sharedpool

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// BackendMooncake is the only HiCache storage backend whose object keys this
// package knows.
const BackendMooncake = "mooncake"

// MaxObjectsPerPage bounds the physical objects one logical page may expand
// to (for example TP 64 × PP 8 × K/V = 1024). Larger layouts are rejected.
const MaxObjectsPerPage = 4096

// GroupIDPrefix starts every Mooncake group id SGLang assigns to the objects
// of one page: "sglang-hicache:" + the page's tagged logical key.
const GroupIDPrefix = "sglang-hicache:"

// Layout is how one SGLang worker with HiCache on Mooncake writes a logical
// page into the store. The fields mirror the "sglang_hicache_mooncake"
// runtime metadata SGLang workers publish and Dynamo reads.
//
// Zero fields mean defaults: Backend "" is "mooncake", TPSize and PPSize 0
// are 1, TPLCMSize 0 is TPSize. PageSize has no default.
//
// A Layout is a plain value; it is safe to copy and to share read-only.
type Layout struct {
	// Backend is the HiCache storage backend; only "mooncake" is supported.
	Backend string
	// PageSize is the tokens (bigrams with Eagle) per page; it must equal
	// the router's block size ([Layout.CheckPageSize]).
	PageSize int
	// TPSize and PPSize are the tensor- and pipeline-parallel sizes.
	TPSize, PPSize int
	// MLA is set for multi-head latent attention models (DeepSeek): one K
	// object per page and PP rank, no V, no TP rank.
	MLA bool
	// Eagle makes pages out of token bigrams ([PageHashes]).
	Eagle bool
	// TPLCMSize is the least common multiple of the TP sizes in a
	// deployment; with SplitHeads each TP rank writes TPLCMSize/TPSize head
	// slices, so the page has TPLCMSize rank objects.
	TPLCMSize int
	// SplitHeads is SGLang's should_split_heads.
	SplitHeads bool
	// ExtraBackendTag prefixes every key ("tag_<hash>...").
	ExtraBackendTag string
	// KeyPrefix, when set, replaces ExtraBackendTag as the key prefix. Recent
	// SGLang folds the tag and the served model name into one prefix
	// ("tag_org-model"); workers advertise it as hicache_object_layout.key_prefix.
	KeyPrefix string
}

// normalized returns l with defaults filled in.
func (l Layout) normalized() Layout {
	if l.Backend == "" {
		l.Backend = BackendMooncake
	}
	if l.TPSize == 0 {
		l.TPSize = 1
	}
	if l.PPSize == 0 {
		l.PPSize = 1
	}
	if l.TPLCMSize == 0 {
		l.TPLCMSize = l.TPSize
	}
	return l
}

// Validate reports whether l describes a layout this package can expand.
// Errors wrap [ErrInvalidLayout] or [ErrUnsupportedBackend].
func (l Layout) Validate() error {
	n := l.normalized()
	switch {
	case n.Backend != BackendMooncake:
		return fmt.Errorf("%w: %q", ErrUnsupportedBackend, l.Backend)
	case n.PageSize <= 0:
		return fmt.Errorf("%w: page size %d", ErrInvalidLayout, l.PageSize)
	case n.TPSize < 0 || n.PPSize < 0 || n.TPLCMSize < 0:
		return fmt.Errorf("%w: negative size (tp %d, pp %d, tp_lcm %d)", ErrInvalidLayout, l.TPSize, l.PPSize, l.TPLCMSize)
	case n.SplitHeads && !n.MLA && n.TPLCMSize%n.TPSize != 0:
		return fmt.Errorf("%w: tp_lcm %d is not a multiple of tp %d", ErrInvalidLayout, n.TPLCMSize, n.TPSize)
	}
	if k := n.objectsPerPage(); k > MaxObjectsPerPage {
		return fmt.Errorf("%w: %d objects per page, limit %d", ErrInvalidLayout, k, MaxObjectsPerPage)
	}
	return nil
}

// CheckPageSize returns an error wrapping [ErrPageSizeMismatch] when the
// router's block size differs from the layout's page size: the page hashes
// would never match, and silently crediting nothing hides the mistake.
func (l Layout) CheckPageSize(blockSize int) error {
	if blockSize != l.PageSize {
		return fmt.Errorf("%w: router block size %d, HiCache page size %d", ErrPageSizeMismatch, blockSize, l.PageSize)
	}
	return nil
}

// Ranks returns the TP rank objects per page and PP rank: TPSize, or
// max(TPLCMSize, TPSize) with SplitHeads; 1 for MLA.
func (l Layout) Ranks() int { return l.normalized().ranks() }

func (l Layout) ranks() int {
	if l.MLA {
		return 1
	}
	if l.SplitHeads {
		return max(l.TPLCMSize, l.TPSize, 1)
	}
	return max(l.TPSize, 1)
}

// ObjectsPerPage returns how many physical objects make one logical page.
func (l Layout) ObjectsPerPage() int { return l.normalized().objectsPerPage() }

func (l Layout) objectsPerPage() int {
	pp := max(l.PPSize, 1)
	if l.MLA {
		return pp
	}
	return pp * l.ranks() * 2
}

// Prefix returns the key prefix in force: KeyPrefix, else ExtraBackendTag,
// else "".
func (l Layout) Prefix() string {
	if l.KeyPrefix != "" {
		return l.KeyPrefix
	}
	return l.ExtraBackendTag
}

// LogicalKey returns the tagged logical key of a page: "<prefix>_<hex>", or
// "<hex>" without a prefix.
func (l Layout) LogicalKey(h PageHash) string {
	if p := l.Prefix(); p != "" {
		return p + "_" + h.String()
	}
	return h.String()
}

// GroupID returns the Mooncake group id SGLang gives every object of the
// page when group semantics are on: "sglang-hicache:" + LogicalKey.
func (l Layout) GroupID(h PageHash) string { return GroupIDPrefix + l.LogicalKey(h) }

// Suffixes returns the object-key suffixes of one page in SGLang's order:
// for MLA "__k" (PP 1) or "_<pp>_k" per PP rank; otherwise, per PP rank and
// per rank, "_<rank>_k" and "_<rank>_v", with "_<rank>_<pp>" when PP > 1.
// The result is freshly allocated.
func (l Layout) Suffixes() []string {
	n := l.normalized()
	pp := max(n.PPSize, 1)
	out := make([]string, 0, n.objectsPerPage())
	if n.MLA {
		if pp == 1 {
			return append(out, "__k")
		}
		for p := range pp {
			out = append(out, "_"+strconv.Itoa(p)+"_k")
		}
		return out
	}
	for p := range pp {
		for r := range n.ranks() {
			mid := "_" + strconv.Itoa(r)
			if pp > 1 {
				mid += "_" + strconv.Itoa(p)
			}
			out = append(out, mid+"_k", mid+"_v")
		}
	}
	return out
}

// AppendObjectKeys appends the physical object keys of page h to dst and
// returns the extended slice.
func (l Layout) AppendObjectKeys(dst []string, h PageHash) []string {
	logical := l.LogicalKey(h)
	for _, s := range l.Suffixes() {
		dst = append(dst, logical+s)
	}
	return dst
}

// Equal reports whether two layouts expand pages identically and hash them
// identically (after defaults).
func (l Layout) Equal(o Layout) bool { return l.diff(o) == "" }

// diff names the first field in which the normalized layouts differ, or "".
func (l Layout) diff(o Layout) string {
	a, b := l.normalized(), o.normalized()
	switch {
	case a.Backend != b.Backend:
		return "backend"
	case a.PageSize != b.PageSize:
		return "page_size"
	case a.TPSize != b.TPSize:
		return "tp_size"
	case a.PPSize != b.PPSize:
		return "pp_size"
	case a.MLA != b.MLA:
		return "is_mla_model"
	case a.Eagle != b.Eagle:
		return "is_eagle"
	case a.TPLCMSize != b.TPLCMSize:
		return "tp_lcm_size"
	case a.SplitHeads != b.SplitHeads:
		return "should_split_heads"
	case a.ExtraBackendTag != b.ExtraBackendTag:
		return "extra_backend_tag"
	case a.KeyPrefix != b.KeyPrefix:
		return "key_prefix"
	}
	return ""
}

// MismatchError says two workers advertise different layouts, so no object
// set means "this page is present" for all of them. It matches
// [ErrLayoutMismatch] with errors.Is.
type MismatchError struct {
	WorkerA, WorkerB uint64
	Field            string // first differing field, in SGLang's spelling
	A, B             Layout
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("sharedpool: layout mismatch: workers %d and %d differ in %s", e.WorkerA, e.WorkerB, e.Field)
}

// Is makes errors.Is(err, ErrLayoutMismatch) true.
func (e *MismatchError) Is(target error) bool { return target == ErrLayoutMismatch }

// Consensus returns the layout every worker agrees on. It fails with
// [ErrNoLayout] for no workers, with a worker-annotated validation error for
// an invalid layout, and with a [*MismatchError] (the two lowest worker ids
// that disagree) when layouts differ. It never guesses.
func Consensus(workers map[uint64]Layout) (Layout, error) {
	if len(workers) == 0 {
		return Layout{}, ErrNoLayout
	}
	ids := make([]uint64, 0, len(workers))
	for id := range workers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	first := workers[ids[0]]
	for _, id := range ids {
		if err := workers[id].Validate(); err != nil {
			return Layout{}, fmt.Errorf("worker %d: %w", id, err)
		}
	}
	for _, id := range ids[1:] {
		if f := first.diff(workers[id]); f != "" {
			return Layout{}, &MismatchError{WorkerA: ids[0], WorkerB: id, Field: f, A: first, B: workers[id]}
		}
	}
	return first.normalized(), nil
}

// schema is a compiled layout: it maps an object key back to its page and
// the object's slot within the page.
type schema struct {
	layout   Layout
	prefix   string   // "<prefix>_" or ""
	suffixes []string // slot -> suffix
	minSuf   int
}

func compile(l Layout) (*schema, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	l = l.normalized()
	s := &schema{layout: l, suffixes: l.Suffixes()}
	if p := l.Prefix(); p != "" {
		s.prefix = p + "_"
	}
	s.minSuf = len(s.suffixes[0])
	for _, suf := range s.suffixes {
		s.minSuf = min(s.minSuf, len(suf))
	}
	return s, nil
}

// n returns the objects per page.
func (s *schema) n() int { return len(s.suffixes) }

// parse maps an object key to its page and slot; ok is false for a key this
// layout never writes (another prefix, pool or rank, uppercase hex, ...).
func (s *schema) parse(key string) (h PageHash, slot int, ok bool) {
	d, slot, ok := s.parseWords(key)
	if !ok {
		return h, 0, false
	}
	for w := range d {
		binary.LittleEndian.PutUint64(h[8*w:], d[w])
	}
	return h, slot, true
}

// parseWords is parse giving the page as the index's digest words: the hex
// is decoded straight into them, and the suffix is read arithmetically and
// then confirmed against the layout's own suffix for that slot, so exactly
// the keys of [Layout.AppendObjectKeys] are accepted. It allocates nothing.
func (s *schema) parseWords(key string) (d [4]uint64, slot int, ok bool) {
	if len(key) < len(s.prefix)+64+s.minSuf || key[:len(s.prefix)] != s.prefix {
		return d, 0, false
	}
	rest := key[len(s.prefix):]
	if d, ok = hexWords(rest[:64]); !ok {
		return d, 0, false
	}
	slot = s.suffixSlot(rest[64:])
	if slot < 0 || slot >= len(s.suffixes) || s.suffixes[slot] != rest[64:] {
		return d, 0, false
	}
	return d, slot, true
}

// suffixSlot returns the slot that suffix would be if it were canonical, or
// -1; the caller confirms it by comparing with s.suffixes[slot]. Suffixes
// are "__k" (MLA, PP 1), "_<pp>_k" (MLA), "_<rank>_k|v" and
// "_<rank>_<pp>_k|v" (PP > 1); slots are ordered by PP rank, then rank,
// then K before V.
func (s *schema) suffixSlot(suf string) int {
	l := &s.layout
	if len(suf) < 3 || suf[0] != '_' {
		return -1
	}
	if l.MLA && l.PPSize == 1 {
		return 0
	}
	a, rest := leadingNumber(suf[1:])
	if a < 0 {
		return -1
	}
	if l.MLA {
		return a
	}
	p := 0
	if l.PPSize > 1 {
		if len(rest) == 0 || rest[0] != '_' {
			return -1
		}
		if p, _ = leadingNumber(rest[1:]); p < 0 {
			return -1
		}
	}
	ranks := l.ranks()
	if a >= ranks || p >= l.PPSize {
		return -1
	}
	slot := 2 * (p*ranks + a)
	if suf[len(suf)-1] == 'v' {
		slot++
	}
	return slot
}

// leadingNumber reads up to five leading decimal digits (larger numbers
// exceed any rank a valid layout has); -1 when there are none or too many.
func leadingNumber(s string) (int, string) {
	n, i := 0, 0
	for ; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
		if i == 5 {
			return -1, s
		}
		n = 10*n + int(s[i]-'0')
	}
	if i == 0 {
		return -1, s
	}
	return n, s[i:]
}

// groupMatches reports whether a group id names the page of key, i.e. is
// "sglang-hicache:" + the key's logical part. It allocates nothing.
func (s *schema) groupMatches(group, key string) bool {
	logical := key[:len(s.prefix)+64]
	return len(group) == len(GroupIDPrefix)+len(logical) &&
		strings.HasPrefix(group, GroupIDPrefix) && group[len(GroupIDPrefix):] == logical
}
