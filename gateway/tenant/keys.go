package tenant

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode"
)

// Bounds on a key file.
const (
	// MaxKeys bounds the keys one file may hold.
	MaxKeys = 100_000
	// MaxKeyLen bounds one key, and so what Authenticate hashes.
	MaxKeyLen = 512
	// MaxNameLen bounds a tenant's name (it prefixes every session id).
	MaxNameLen = 64
	// MinKeyLen is the shortest key accepted: 16 bytes, so that no key in
	// the file can be guessed by trying.
	MinKeyLen = 16
	// maxFileBytes bounds a key file.
	maxFileBytes = 64 << 20
)

// Errors callers branch on.
var (
	// ErrNoKey: the request carries no key (no Authorization: Bearer, no
	// x-api-key).
	ErrNoKey = errors.New("tenant: no API key (send Authorization: Bearer KEY or x-api-key: KEY)")
	// ErrBadKey: the request's key is not in the key file.
	ErrBadKey = errors.New("tenant: invalid API key")
	// ErrSyntax wraps every key-file parse error.
	ErrSyntax = errors.New("tenant: key file")
)

// Tenant is the owner of one or more API keys. A *Tenant returned by
// Authenticate is shared and must not be modified.
type Tenant struct {
	// Name identifies the tenant: it scopes its sessions (Scope), its
	// cache salt (Salt) and its metrics. [A-Za-z0-9._-], 1 to 64 bytes.
	Name string
	// Admin keys may read /metrics and use the control endpoints (worker
	// registry, pause and resume, releases of any tenant's program).
	Admin bool
	// Weight is the tenant's share of contended engines (default 1).
	Weight int
	// MaxInFlight bounds the tenant's requests in flight at once; past it
	// a request gets 429 with Retry-After (0: unlimited).
	MaxInFlight int
	// MaxSessions bounds the tenant's live sessions (programs); a request
	// that would open one more gets 429 (0: unlimited).
	MaxSessions int
	// MaxPrograms bounds the tenant's programs admission has let in at
	// once (with admission on; admission.Group.MaxAdmitted): past it a
	// new session waits at the door, not refused, until one of the
	// tenant's programs ends (0: unlimited).
	MaxPrograms int
	// SharedCache opts the tenant out of cache isolation: its requests are
	// forwarded without a cache salt, so it shares cached prefixes (a
	// public system prompt) with every other tenant that opted out.
	SharedCache bool
	// Salt is the cache_salt forwarded on the tenant's requests ("" when
	// SharedCache): a digest of the name, so replicas agree without
	// sharing state and a client cannot choose another tenant's salt
	// (the gateway replaces any cache_salt the client sends).
	Salt string
}

// Keys is a parsed key file: immutable, safe for concurrent use.
type Keys struct {
	// byDigest maps SHA-256(key) to the key and its tenant. Looking a key
	// up by its digest leaks, through timing, at most something about the
	// digest, never the key; the key itself is then compared in constant
	// time.
	byDigest map[[32]byte]entry
	tenants  []*Tenant
	byName   map[string]*Tenant
}

type entry struct {
	key    []byte
	tenant *Tenant
}

// Len returns the number of keys.
func (k *Keys) Len() int { return len(k.byDigest) }

// Tenants returns the tenants, in the order they first appear in the
// file. The caller must not modify the slice or the tenants.
func (k *Keys) Tenants() []*Tenant { return k.tenants }

// Tenant returns the tenant named name, or nil.
func (k *Keys) Tenant(name string) *Tenant { return k.byName[name] }

// Lookup returns the tenant owning key, or ErrBadKey.
func (k *Keys) Lookup(key string) (*Tenant, error) {
	if key == "" {
		return nil, ErrNoKey
	}
	if len(key) > MaxKeyLen {
		return nil, ErrBadKey
	}
	e, ok := k.byDigest[sha256.Sum256([]byte(key))]
	if !ok || subtle.ConstantTimeCompare(e.key, []byte(key)) != 1 {
		return nil, ErrBadKey
	}
	return e.tenant, nil
}

// Parse reads a key file. Each line that is not blank or a # comment is
//
//	NAME KEY [admin] [weight=N] [max-in-flight=N] [max-sessions=N] [shared-cache]
//
// A tenant may hold several keys (one line each); its options are the
// union of its lines' (a number given twice must agree). Keys are unique
// across the file and at least 16 bytes.
func Parse(r io.Reader) (*Keys, error) {
	byName := map[string]*Tenant{}
	k := &Keys{byDigest: map[[32]byte]entry{}, byName: byName}
	sc := bufio.NewScanner(io.LimitReader(r, maxFileBytes+1))
	sc.Buffer(make([]byte, 0, 4096), 1<<16)
	line, read := 0, 0
	for sc.Scan() {
		line++
		read += len(sc.Bytes()) + 1
		if read > maxFileBytes {
			return nil, fmt.Errorf("%w: larger than %d bytes", ErrSyntax, maxFileBytes)
		}
		f := strings.Fields(string(bytes.TrimSpace(sc.Bytes())))
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if err := k.addLine(byName, f); err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrSyntax, line, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	for _, t := range k.tenants {
		if t.Weight == 0 {
			t.Weight = 1
		}
		if !t.SharedCache {
			t.Salt = Salt(t.Name)
		}
	}
	return k, nil
}

func (k *Keys) addLine(byName map[string]*Tenant, f []string) error {
	if len(f) < 2 {
		return errors.New("want NAME KEY [options]")
	}
	name, key := f[0], f[1]
	if !validName(name) {
		return fmt.Errorf("tenant name %q: want 1 to %d of [A-Za-z0-9._-]", name, MaxNameLen)
	}
	if len(key) < MinKeyLen || len(key) > MaxKeyLen {
		return fmt.Errorf("tenant %s: key of %d bytes, want %d to %d", name, len(key), MinKeyLen, MaxKeyLen)
	}
	if len(k.byDigest) >= MaxKeys {
		return fmt.Errorf("more than %d keys", MaxKeys)
	}
	d := sha256.Sum256([]byte(key))
	if _, dup := k.byDigest[d]; dup {
		return fmt.Errorf("tenant %s: key already given to a tenant", name)
	}
	t := byName[name]
	if t == nil {
		t = &Tenant{Name: name}
		byName[name] = t
		k.tenants = append(k.tenants, t)
	}
	for _, opt := range f[2:] {
		if err := t.set(opt); err != nil {
			return fmt.Errorf("tenant %s: %v", name, err)
		}
	}
	k.byDigest[d] = entry{key: []byte(key), tenant: t}
	return nil
}

func (t *Tenant) set(opt string) error {
	name, val, hasVal := strings.Cut(opt, "=")
	var dst *int
	switch name {
	case "admin":
		t.Admin = true
	case "shared-cache":
		t.SharedCache = true
	case "weight":
		dst = &t.Weight
	case "max-in-flight":
		dst = &t.MaxInFlight
	case "max-sessions":
		dst = &t.MaxSessions
	case "max-programs":
		dst = &t.MaxPrograms
	default:
		return fmt.Errorf("unknown option %q", opt)
	}
	if dst == nil {
		if hasVal {
			return fmt.Errorf("option %s takes no value", name)
		}
		return nil
	}
	n, err := strconv.Atoi(val)
	if err != nil || n < 1 || n > 1<<30 {
		return fmt.Errorf("option %s: want a whole number from 1, got %q", name, val)
	}
	if *dst != 0 && *dst != n {
		return fmt.Errorf("option %s given twice (%d and %d)", name, *dst, n)
	}
	*dst = n
	return nil
}

func validName(s string) bool {
	if s == "" || len(s) > MaxNameLen {
		return false
	}
	for _, r := range s {
		if r > unicode.MaxASCII || !(r == '.' || r == '_' || r == '-' ||
			'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9') {
			return false
		}
	}
	return true
}

// Salt returns the cache_salt of a tenant named name: 32 hex digits of
// SHA-256("agentkv cache_salt" ‖ 0 ‖ name). It is deterministic, so every
// replica and restart forwards the same salt and the tenant's cached
// prefixes survive both.
func Salt(name string) string {
	s := sha256.Sum256([]byte("agentkv cache_salt\x00" + name))
	return hex.EncodeToString(s[:16])
}

// Scope returns a session id scoped by tenant: the same id sent by two
// tenants names two sessions. With no tenant (keys off) it returns id.
func Scope(t *Tenant, id string) string {
	if t == nil || id == "" {
		return id
	}
	return t.Name + "/" + id
}

// Key returns the API key a request carries: Authorization: Bearer KEY,
// else x-api-key (the Anthropic SDK's header). Empty when neither is sent.
func Key(authorization, xAPIKey string) string {
	if len(authorization) > 7 && strings.EqualFold(authorization[:7], "bearer ") {
		return strings.TrimSpace(authorization[7:])
	}
	return strings.TrimSpace(xAPIKey)
}

// Set holds the current Keys and swaps them on Reload: safe for concurrent
// use; a request authenticates against the keys current when it arrives.
type Set struct {
	path string
	keys atomic.Pointer[Keys]
}

// Load reads the key file at path into a new Set.
func Load(path string) (*Set, error) {
	s := &Set{path: path}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// NewSet returns a Set over fixed keys (Reload then re-reads nothing).
func NewSet(k *Keys) *Set {
	s := &Set{}
	s.keys.Store(k)
	return s
}

// Reload re-reads the key file. On any error the keys in use stay as they
// were and the error says why.
func (s *Set) Reload() error {
	if s.path == "" {
		return nil
	}
	f, err := os.Open(s.path)
	if err != nil {
		return fmt.Errorf("tenant: %w", err)
	}
	defer f.Close()
	k, err := Parse(f)
	if err != nil {
		return fmt.Errorf("%s: %w", s.path, err)
	}
	if k.Len() == 0 {
		return fmt.Errorf("%w: %s holds no keys", ErrSyntax, s.path)
	}
	s.keys.Store(k)
	return nil
}

// Keys returns the keys in use.
func (s *Set) Keys() *Keys { return s.keys.Load() }

// Authenticate returns the tenant whose key the request headers carry:
// ErrNoKey when none is sent, ErrBadKey when it is not known.
func (s *Set) Authenticate(authorization, xAPIKey string) (*Tenant, error) {
	return s.keys.Load().Lookup(Key(authorization, xAPIKey))
}
