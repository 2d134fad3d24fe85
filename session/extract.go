package session

import (
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"unicode/utf8"
)

// DefaultMaxIDLen is the longest id accepted, in bytes.
const DefaultMaxIDLen = 256

// DefaultMaxBodyBytes is how much of a request body the middleware reads
// for body fallbacks.
const DefaultMaxBodyBytes = 1 << 20

// ErrRefused is matched (errors.Is) by every *RefusedError.
var ErrRefused = errors.New("session: id refused")

// ErrConfig reports an invalid Config or Rule.
var ErrConfig = errors.New("session: invalid config")

// Reason says why an id was refused.
type Reason uint8

const (
	// TooLong: the id is longer than the configured maximum.
	TooLong Reason = iota
	// ControlChar: the id contains a byte below 0x20 or 0x7f.
	ControlChar
	// InvalidUTF8: the id is not valid UTF-8.
	InvalidUTF8
	// NumReasons is the number of reasons (the length of Stats.Refused).
	NumReasons
)

var reasonNames = [NumReasons]string{"too_long", "control_char", "invalid_utf8"}

func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// RefusedError is returned by FromRequest when an id fails validation. The
// request should proceed without a session (FromRequest returns the zero
// AgentContext alongside it).
type RefusedError struct {
	Field  string // "session", "parent", "agent", "turn" or "program"
	Reason Reason
	Len    int // length of the refused value in bytes
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("session: %s id refused: %s (%d bytes)", e.Field, e.Reason, e.Len)
}

// Is makes errors.Is(err, ErrRefused) true.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// Rule is one row of the harness mapping table: which headers carry a
// harness's session identity. Header names are case-insensitive. For each
// list, the first header present with a non-empty value is used.
//
// Func, when set, runs after the header lookups and may fill or overwrite
// any field of ac. It is called first with a nil body; if no rule found a
// session in the headers and a body is available, rules with a Func are
// called again, in order, with the body. Func must not keep body (the
// caller may reuse it) and must not modify h. Every id a rule produces is
// validated like a header value.
type Rule struct {
	Harness string   // reported in AgentContext.Harness; required
	Session []string // session id headers
	Parent  []string // parent session id headers
	Final   []string // headers whose value "true", "1" or "yes" ends the session
	Compact []string // headers whose value "true", "1" or "yes" marks a compaction
	Agent   []string // agent id headers
	Turn    []string // turn id headers
	Func    func(h http.Header, body []byte, ac *AgentContext)
}

// Canonical header names (Dynamo-compatible). They win over every rule.
const (
	HeaderSessionID       = "X-Dynamo-Session-Id"
	HeaderParentSessionID = "X-Dynamo-Parent-Session-Id"
	HeaderSessionFinal    = "X-Dynamo-Session-Final"
)

// Claude Code, Codex and OpenCode header names (canonical form).
const (
	headerClaudeSession     = "X-Claude-Code-Session-Id"
	headerClaudeAgent       = "X-Claude-Code-Agent-Id"
	headerClaudeParentAgent = "X-Claude-Code-Parent-Agent-Id"
	headerCodexSession      = "Session-Id"
	headerCodexThread       = "Thread-Id"
	headerCodexTurnMeta     = "X-Codex-Turn-Metadata"
	headerCodexParent       = "X-Codex-Parent-Thread-Id"
	// Codex before 0.5x sent session_id and conversation_id (underscores:
	// net/http canonicalises them to these keys).
	headerCodexLegacySession      = "Session_id"
	headerCodexLegacyConversation = "Conversation_id"
	headerOpenCodeSession         = "X-Session-Id"
	headerOpenCodeAffinity        = "X-Session-Affinity"
	headerOpenCodeParent          = "X-Parent-Session-Id"
	headerSGLangRoutingKey        = "X-Smg-Routing-Key"
	headerCodexWindow             = "X-Codex-Window-Id"
	headerCodexOriginator         = "Originator"
	headerClaudeCompaction        = "X-Claude-Code-Compaction"
	headerClaudeRequestClass      = "X-Claude-Code-Request-Class"
	headerDeepSeekSession         = "X-Deepseek-Harness-Session-Id"
	headerDeepSeekParent          = "X-Deepseek-Harness-Parent-Session-Id"
	headerDeepSeekCompact         = "X-Deepseek-Harness-Compact"
	headerClientRequestID         = "X-Client-Request-Id"
	headerAuthorization           = "Authorization"
)

// DefaultRules returns a fresh copy of the built-in rows, in precedence
// order: Claude Code, Codex, Pi, DeepSeek, OpenCode (and SkyRL), SGLang's
// routing key, a session-shaped x-client-request-id. Add a harness by
// appending (or prepending, to take precedence) a Rule and passing the
// slice as Config.Rules.
//
// Claude Code: X-Claude-Code-Session-Id is the session; a subagent's
// x-claude-code-agent-id makes the session "<session>/<agent>" whose parent
// is "<session>/<x-claude-code-parent-agent-id>" when nested, else the root
// session.
//
// Codex: the session is the thread (thread-id, then the turn metadata's
// thread_id, then session-id, then its session_id, then older Codex's
// conversation_id and session_id headers); x-codex-parent-thread-id
// is the parent; x-codex-turn-metadata (JSON) gives agent_name and turn_id.
//
// OpenCode: x-session-id, else x-session-affinity; parent
// x-parent-session-id. SkyRL's X-Session-ID is the same header.
//
// Pi (openai-responses): the session_id header (net/http's "Session_id")
// when no Codex header and no Codex originator comes with it (older Codex
// sent session_id too, always with originator codex_*).
//
// DeepSeek's harness: x-deepseek-harness-session-id, parent
// x-deepseek-harness-parent-session-id, x-deepseek-harness-compact: 1
// marks a compaction.
//
// x-client-request-id, last and only when it is session-shaped (a UUID,
// 8-4-4-4-12 hex digits, the form harnesses that send it use for their
// session: Pi, Codex); anything else is a per-request id and is ignored.
//
// SGLang model gateway clients (slime, miles and other RL rollout
// workers): X-SMG-Routing-Key, the key its consistent_hashing and manual
// policies pin a session to one engine by.
func DefaultRules() []Rule {
	return []Rule{
		{Harness: HarnessClaudeCode, Func: claudeRule},
		{Harness: HarnessCodex, Parent: []string{headerCodexParent}, Func: codexRule},
		{Harness: HarnessPi, Func: piRule},
		{
			Harness: HarnessDeepSeek,
			Session: []string{headerDeepSeekSession},
			Parent:  []string{headerDeepSeekParent},
			Compact: []string{headerDeepSeekCompact},
		},
		{
			Harness: HarnessOpenCode,
			Session: []string{headerOpenCodeSession, headerOpenCodeAffinity},
			Parent:  []string{headerOpenCodeParent},
		},
		{Harness: HarnessSGLang, Session: []string{headerSGLangRoutingKey}},
		{Harness: HarnessClientID, Func: clientIDRule},
	}
}

// piRule takes the session_id header when nothing marks it as Codex's.
func piRule(h http.Header, body []byte, ac *AgentContext) {
	if body != nil {
		return
	}
	s := header(h, headerCodexLegacySession)
	if s == "" || header(h, headerCodexLegacyConversation) != "" || codexOriginator(h) {
		return
	}
	ac.SessionID = s
}

func codexOriginator(h http.Header) bool {
	return strings.HasPrefix(strings.ToLower(header(h, headerCodexOriginator)), "codex")
}

// clientIDRule takes x-client-request-id when it is session-shaped.
func clientIDRule(h http.Header, body []byte, ac *AgentContext) {
	if body != nil {
		return
	}
	if v := header(h, headerClientRequestID); isUUID(v) {
		ac.SessionID = v
	}
}

// isUUID reports whether s is 8-4-4-4-12 hex digits.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// bearerRule takes the API key as the session (slime's agent facade);
// only with Config.BearerSession.
func bearerRule(h http.Header, body []byte, ac *AgentContext) {
	if body != nil {
		return
	}
	v := header(h, headerAuthorization)
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		ac.SessionID = strings.TrimSpace(v[7:])
	}
}

// windowNumber is the digits after the last ':' of a Codex window id (0
// when there are none or they overflow).
func windowNumber(v string) uint32 {
	i := strings.LastIndexByte(v, ':')
	if i < 0 || i == len(v)-1 {
		return 0
	}
	var n uint64
	for _, c := range []byte(v[i+1:]) {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + uint64(c-'0')
		if n > 1<<32-1 {
			return 0
		}
	}
	return uint32(n)
}

func header(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// claudeContext fills ac from Claude Code agent headers given the root
// session id s.
func claudeContext(h http.Header, s string, ac *AgentContext) {
	ac.SessionID = s
	agent := header(h, headerClaudeAgent)
	if agent == "" || s == "" {
		return
	}
	ac.AgentID = agent
	ac.SessionID = s + "/" + agent
	if p := header(h, headerClaudeParentAgent); p != "" && p != agent {
		ac.ParentSessionID = s + "/" + p
	} else {
		ac.ParentSessionID = s
	}
}

func claudeRule(h http.Header, body []byte, ac *AgentContext) {
	if body != nil {
		return // the body fallback (metadata.user_id) is built in
	}
	claudeContext(h, header(h, headerClaudeSession), ac)
	claudeCompaction(h, ac)
}

// claudeCompaction reads Claude Code's compaction markers.
func claudeCompaction(h http.Header, ac *AgentContext) {
	if truthy(header(h, headerClaudeCompaction)) ||
		strings.Contains(strings.ToLower(header(h, headerClaudeRequestClass)), "compact") {
		ac.Compaction = true
	}
}

func codexRule(h http.Header, body []byte, ac *AgentContext) {
	if body != nil {
		return // prompt_cache_key is a built-in body fallback
	}
	meta := header(h, headerCodexTurnMeta)
	var metaThread, metaSession string
	if meta != "" {
		f := newFields(meta)
		for {
			k, v, ok := f.next()
			if !ok {
				break
			}
			switch {
			case keyIs(k, "thread_id"):
				metaThread, _ = jsonString(v)
			case keyIs(k, "session_id"):
				metaSession, _ = jsonString(v)
			case keyIs(k, "agent_name"):
				ac.AgentID, _ = jsonString(v)
			case keyIs(k, "turn_id"):
				ac.TurnID, _ = jsonString(v)
			case keyIs(k, "request_kind"):
				if kind, _ := jsonString(v); kind == "compaction" {
					ac.Compaction = true
				}
			}
		}
	}
	ac.Window = windowNumber(header(h, headerCodexWindow))
	legacy := "" // session_id alone is Pi's unless Codex's originator comes with it
	if header(h, headerCodexLegacyConversation) != "" || codexOriginator(h) {
		legacy = header(h, headerCodexLegacySession)
	}
	for _, s := range [...]string{header(h, headerCodexThread), metaThread, header(h, headerCodexSession), metaSession,
		header(h, headerCodexLegacyConversation), legacy} {
		if s != "" {
			ac.SessionID = s
			break
		}
	}
}

// Config configures an Extractor. The zero value is the default.
type Config struct {
	// Rules is the harness mapping table, in precedence order. nil means
	// DefaultRules(); an empty non-nil slice means canonical headers and
	// body fallbacks only.
	Rules []Rule
	// MaxIDLen is the longest id accepted, in bytes (default 256).
	MaxIDLen int
	// MaxBodyBytes caps how much of a body the middleware reads for the
	// body fallbacks (default 1 MiB). Negative means never read the body.
	MaxBodyBytes int64
	// AlwaysReadBody makes the middleware read the body prefix even when
	// the headers name a session (to pick up a ThunderAgent program_id).
	// By default the body is read only when the headers name no session.
	AlwaysReadBody bool
	// BearerSession makes the API key the session when no header before
	// it names one: Authorization: Bearer <session>, as slime's agent
	// facade sends it. Off by default: elsewhere the key names a tenant,
	// not a session, and would put every request of a tenant in one
	// session (and the key into traces and metrics).
	BearerSession bool
}

type rule struct {
	harness                                    string
	session, parent, final, compact, agent, tn []string
	fn                                         func(http.Header, []byte, *AgentContext)
	builtin                                    uint8
}

// Built-in rule funcs are recognised in New and called directly (not
// through the func value) so the compiler sees they keep nothing.
const (
	builtinNone uint8 = iota
	builtinClaude
	builtinCodex
	builtinPi
	builtinClientID
	builtinBearer
)

// Extractor turns requests into AgentContexts. It is immutable after New
// except for its atomic counters, and safe for concurrent use.
type Extractor struct {
	rules     []rule
	maxID     int
	maxBody   int64
	alwaysBod bool
	refused   [NumReasons]atomic.Uint64
	malformed atomic.Uint64
}

// New returns an Extractor for cfg.
func New(cfg Config) (*Extractor, error) {
	e := &Extractor{maxID: cfg.MaxIDLen, maxBody: cfg.MaxBodyBytes, alwaysBod: cfg.AlwaysReadBody}
	if e.maxID == 0 {
		e.maxID = DefaultMaxIDLen
	}
	if e.maxID < 0 {
		return nil, fmt.Errorf("%w: MaxIDLen %d < 0", ErrConfig, cfg.MaxIDLen)
	}
	if e.maxBody == 0 {
		e.maxBody = DefaultMaxBodyBytes
	}
	rules := cfg.Rules
	if rules == nil {
		rules = DefaultRules()
	}
	if cfg.BearerSession {
		rules = append(slices.Clip(rules), Rule{Harness: HarnessBearer, Func: bearerRule})
	}
	canon := func(names []string) []string {
		out := make([]string, 0, len(names))
		for _, n := range names {
			if n = strings.TrimSpace(n); n != "" {
				out = append(out, http.CanonicalHeaderKey(n))
			}
		}
		return out
	}
	for i, r := range rules {
		if r.Harness == "" {
			return nil, fmt.Errorf("%w: rule %d has no Harness name", ErrConfig, i)
		}
		if len(r.Session) == 0 && r.Func == nil {
			return nil, fmt.Errorf("%w: rule %q has neither Session headers nor Func", ErrConfig, r.Harness)
		}
		e.rules = append(e.rules, rule{
			harness: r.Harness, session: canon(r.Session), parent: canon(r.Parent),
			final: canon(r.Final), compact: canon(r.Compact), agent: canon(r.Agent), tn: canon(r.Turn), fn: r.Func,
		})
		if r.Func != nil {
			b := &e.rules[len(e.rules)-1].builtin
			switch reflect.ValueOf(r.Func).Pointer() {
			case reflect.ValueOf(claudeRule).Pointer():
				*b = builtinClaude
			case reflect.ValueOf(codexRule).Pointer():
				*b = builtinCodex
			case reflect.ValueOf(piRule).Pointer():
				*b = builtinPi
			case reflect.ValueOf(clientIDRule).Pointer():
				*b = builtinClientID
			case reflect.ValueOf(bearerRule).Pointer():
				*b = builtinBearer
			}
		}
	}
	return e, nil
}

// Default is the Extractor used by the package-level FromRequest and
// Middleware: built-in rules, 256-byte ids, 1 MiB body cap.
var Default = func() *Extractor {
	e, err := New(Config{})
	if err != nil {
		panic(err) // unreachable: the zero Config is valid
	}
	return e
}()

// FromRequest extracts the AgentContext of r with the Default extractor.
func FromRequest(r *http.Request, body []byte) (AgentContext, error) {
	return Default.FromRequest(r, body)
}

func firstHeader(h http.Header, keys []string) string {
	for _, k := range keys {
		if v := header(h, k); v != "" {
			return v
		}
	}
	return ""
}

func truthy(v string) bool {
	return strings.EqualFold(v, "true") || v == "1" || strings.EqualFold(v, "yes")
}

func (r *rule) apply(h http.Header, body []byte, ac *AgentContext) {
	if body == nil {
		ac.SessionID = firstHeader(h, r.session)
		ac.ParentSessionID = firstHeader(h, r.parent)
		ac.AgentID = firstHeader(h, r.agent)
		ac.TurnID = firstHeader(h, r.tn)
		for _, k := range r.final {
			if truthy(header(h, k)) {
				ac.Final = true
			}
		}
		for _, k := range r.compact {
			if truthy(header(h, k)) {
				ac.Compaction = true
			}
		}
	}
	switch r.builtin { // static calls: ac stays on the caller's stack
	case builtinClaude:
		claudeRule(h, body, ac)
	case builtinCodex:
		codexRule(h, body, ac)
	case builtinPi:
		piRule(h, body, ac)
	case builtinClientID:
		clientIDRule(h, body, ac)
	case builtinBearer:
		bearerRule(h, body, ac)
	}
	switch {
	case r.builtin != builtinNone:
	case r.fn != nil:
		// A user Func may keep its argument: give it a heap copy so the
		// common (built-in only) path allocates nothing.
		p := new(AgentContext)
		*p = *ac
		r.fn(h, body, p)
		*ac = *p
	}
}

// FromRequest extracts the AgentContext of r. body is an optional prefix
// of the request body (nil when unread); it is scanned, never kept, and
// only consulted when the headers name no session, except for the
// ThunderAgent program_id which is taken whenever a body is given.
//
// Precedence (the source chain): the canonical x-dynamo-* headers win;
// otherwise the first Rule (in table order) whose headers name a session;
// otherwise the body: prompt_cache_key (Codex, Pi), Claude Code's
// metadata.user_id (a JSON string holding session_id, or the plain
// "..._session_<id>" form), OpenAI's user, session_params.session_id, then
// program_id / extra_body.program_id. A parent equal to the session is
// dropped. A request none of them names is left to the router, which
// infers its session from the prompt (AgentContext.Inferred).
//
// A request with no session yields the zero AgentContext and a nil error.
// An id that is too long, holds a control character or is not UTF-8 yields
// the zero AgentContext and a *RefusedError; the refusal is counted.
func (e *Extractor) FromRequest(r *http.Request, body []byte) (AgentContext, error) {
	if r == nil {
		return AgentContext{}, nil
	}
	h := r.Header
	var ac AgentContext
	for i := range e.rules {
		var c AgentContext
		e.rules[i].apply(h, nil, &c)
		if c.SessionID != "" {
			ac = c
			ac.Harness = e.rules[i].harness
			break
		}
	}
	if dyn := header(h, HeaderSessionID); dyn != "" {
		if ac.SessionID != dyn {
			ac.ParentSessionID = "" // the harness parent was relative to its own id
		}
		ac.SessionID = dyn
		if ac.Harness == "" {
			ac.Harness = HarnessDynamo
		}
		if p := header(h, HeaderParentSessionID); p != "" {
			ac.ParentSessionID = p
		}
	}
	if truthy(header(h, HeaderSessionFinal)) {
		ac.Final = true
	}
	if len(body) > 0 {
		e.fromBody(h, body, &ac)
	}
	if ac.SessionID == "" {
		return AgentContext{}, nil
	}
	if ac.ParentSessionID == ac.SessionID {
		ac.ParentSessionID = ""
	}
	if err := e.validate(&ac); err != nil {
		return AgentContext{}, err
	}
	return ac, nil
}

// fromBody applies the body fallbacks in one pass over the top-level
// members, then picks the first present in the chain's order.
func (e *Extractor) fromBody(h http.Header, body []byte, ac *AgentContext) {
	var meta, cacheKey, user, param, program string
	f := newFields(body)
	for {
		k, v, ok := f.next()
		if !ok {
			break
		}
		switch {
		case keyIs(k, "metadata") && ac.SessionID == "":
			if raw, ok := member(v, "user_id"); ok {
				if uid, ok := jsonString(string(raw)); ok {
					meta = claudeUserSession(uid)
				} else {
					e.malformed.Add(1)
				}
			}
		case keyIs(k, "prompt_cache_key") && ac.SessionID == "":
			cacheKey, _ = jsonString(string(v))
		case keyIs(k, "user") && ac.SessionID == "":
			user, _ = jsonString(string(v))
		case keyIs(k, "session_params") && ac.SessionID == "":
			if raw, ok := member(v, "session_id"); ok {
				param, _ = jsonID(string(raw))
			}
		case keyIs(k, "program_id"):
			if id, ok := jsonID(string(v)); ok {
				program = id
			}
		case keyIs(k, "extra_body") && program == "":
			if raw, ok := member(v, "program_id"); ok {
				program, _ = jsonID(string(raw))
			}
		}
	}
	if program != "" {
		ac.ProgramID = program
	}
	if ac.SessionID != "" {
		return
	}
	for i := range e.rules {
		if e.rules[i].fn == nil || e.rules[i].builtin != builtinNone {
			continue // the built-ins' body fallbacks are handled below
		}
		var c AgentContext
		e.rules[i].fn(h, body, &c)
		if c.SessionID != "" {
			c.Harness = e.rules[i].harness
			c.Final = c.Final || ac.Final
			if c.ProgramID == "" {
				c.ProgramID = ac.ProgramID
			}
			*ac = c
			return
		}
	}
	switch {
	case cacheKey != "":
		ac.SessionID = cacheKey
		ac.Harness = HarnessCodex
	case meta != "":
		claudeContext(h, meta, ac)
		claudeCompaction(h, ac)
		ac.Harness = HarnessClaudeCode
	case user != "":
		ac.SessionID = user
		ac.Harness = HarnessOpenAIUser
	case param != "":
		ac.SessionID = param
		ac.Harness = HarnessSessionParam
	case program != "":
		ac.SessionID = program
		ac.Harness = HarnessThunderAgent
	}
}

// claudeUserSession finds the session id in Claude Code's metadata.user_id:
// a JSON object string with "session_id", or the legacy
// "user_<hash>_account_<uuid>_session_<uuid>" form.
func claudeUserSession(uid string) string {
	if raw, ok := member(uid, "session_id"); ok {
		s, _ := jsonString(raw)
		return s
	}
	if i := strings.LastIndex(uid, "_session_"); i >= 0 {
		return uid[i+len("_session_"):]
	}
	return ""
}

func (e *Extractor) check(field, v string) error {
	if v == "" {
		return nil
	}
	reason := NumReasons
	if len(v) > e.maxID {
		reason = TooLong
	} else {
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < 0x20 || c == 0x7f {
				reason = ControlChar
				break
			}
		}
		if reason == NumReasons && !utf8.ValidString(v) {
			reason = InvalidUTF8
		}
	}
	if reason == NumReasons {
		return nil
	}
	e.refused[reason].Add(1)
	return &RefusedError{Field: field, Reason: reason, Len: len(v)}
}

func (e *Extractor) validate(ac *AgentContext) error {
	for _, f := range [...]struct{ name, v string }{
		{"session", ac.SessionID}, {"parent", ac.ParentSessionID},
		{"agent", ac.AgentID}, {"turn", ac.TurnID}, {"program", ac.ProgramID},
	} {
		if err := e.check(f.name, f.v); err != nil {
			return err
		}
	}
	return nil
}

// Stats counts what the Extractor refused or dropped since it was made.
type Stats struct {
	// Refused counts requests refused, by the Reason of the first bad id.
	Refused [NumReasons]uint64
	// MalformedJSON counts JSON-carrying fields (Claude Code's
	// metadata.user_id) that could not be decoded and were ignored.
	MalformedJSON uint64
}

// Total returns the number of refused requests.
func (s Stats) Total() uint64 {
	var n uint64
	for _, v := range s.Refused {
		n += v
	}
	return n
}

// Stats returns a snapshot of the counters.
func (e *Extractor) Stats() Stats {
	var s Stats
	for i := range s.Refused {
		s.Refused[i] = e.refused[i].Load()
	}
	s.MalformedJSON = e.malformed.Load()
	return s
}
