// Package session knows which agent session each request belongs to, and
// keeps the table of live sessions.
//
// # Identity from real traffic: the source chain
//
// Agent harnesses already say who they are, each in its own dialect.
// FromRequest maps them, with no configuration, to one AgentContext. The
// sources are tried in this order, and the first that names a session
// wins:
//
//  1. Canonical (Dynamo-compatible; wins over everything):
//     x-dynamo-session-id, x-dynamo-parent-session-id, and
//     x-dynamo-session-final ("true", "1" or "yes" ends the session).
//  2. Harness headers, one Rule each, in table order (DefaultRules):
//     - Claude Code: X-Claude-Code-Session-Id. A subagent's requests add
//     x-claude-code-agent-id: the request belongs to the child session
//     "<session>/<agent>" whose parent is the root session, or
//     "<session>/<x-claude-code-parent-agent-id>" when nested. Agent ids
//     are namespaced by the root session because replays and harness
//     versions reuse short agent ids across sessions.
//     - Codex: the session is the thread: thread-id, then
//     x-codex-turn-metadata's thread_id, then session-id, then the
//     metadata's session_id; the parent is x-codex-parent-thread-id;
//     agent_name and turn_id come from the turn metadata.
//     - Pi (openai-responses): the session_id header, unless Codex's
//     originator or conversation_id comes with it (older Codex).
//     - DeepSeek's harness: x-deepseek-harness-session-id, parent
//     x-deepseek-harness-parent-session-id.
//     - OpenCode: x-session-id (also SkyRL's X-Session-ID), else
//     x-session-affinity (also Pi's opt-in affinity header); parent
//     x-parent-session-id.
//     - SGLang model gateway clients (slime, miles): X-SMG-Routing-Key.
//     - x-client-request-id, only when it is session-shaped (a UUID).
//     - Bearer as session (slime's agent facade), only with
//     Config.BearerSession: Authorization: Bearer <session>.
//  3. The body: prompt_cache_key (Codex, Pi), Claude Code's
//     metadata.user_id (a JSON string holding session_id, or the plain
//     "user_..._account_..._session_<id>" form), OpenAI's user,
//     session_params.session_id, then ThunderAgent's program_id (or
//     extra_body.program_id; always reported as ProgramID).
//  4. Inferred: a request none of these names gets the zero AgentContext,
//     and the router infers its session from the prompt's blocks (the root
//     package's Infer stage: it joins the live session whose context the
//     prompt extends, or opens one; AgentContext.Inferred is set).
//
// A parent equal to its session is dropped. The harness rows are a table
// (Rule, DefaultRules, Config.Rules): add your own harness's headers, or a
// Func for anything header lists cannot say, without forking.
//
// # Compaction and rollover
//
// Compaction rewrites a session's context under the same identity.
// AgentContext.Compaction is set by Codex's turn metadata (request_kind
// "compaction"), Claude Code's x-claude-code-compaction or a request class
// naming compaction, and DeepSeek's x-deepseek-harness-compact; Codex's
// window number (x-codex-window-id, AgentContext.Window) rising within a
// session is a compaction too, reported by Table.Begin (Info.Compacted).
// The program continues (admission keeps its accounting) while its lineage
// restarts. A rollover (Hermes starts a child session on compression,
// OpenClaw moves to nextSessionId) is a new session whose parent is the
// old one: the client names the link with a parent header.
//
// # Untrusted input
//
// Every id is refused when longer than 256 bytes (Config.MaxIDLen), when it
// holds a control character, or when it is not UTF-8. A refused request
// yields the zero AgentContext and a *RefusedError (errors.Is ErrRefused);
// it proceeds without a session, and Extractor.Stats counts it by Reason.
// The body is scanned by a small allocation-free JSON member scanner that
// never recurses and stops cleanly at any truncation, so a body prefix is
// always safe to pass.
//
// # Middleware
//
// Middleware stores the AgentContext in the request context (FromContext,
// IDFromContext). When the headers name no session it reads at most
// MaxBodyBytes (1 MiB) of a JSON body for the fallbacks and hands the next
// handler a body that replays those bytes ahead of the unread rest: nothing
// is consumed, and nothing beyond the cap is read.
//
// # The session table
//
// Table holds live sessions: bounded (65,536 by default, least recently used
// out), idle expiry (30 min), the parent/child tree (a subagent's parent, a
// parent's live children, the root), the Phase: Reasoning while a request runs and
// Acting between requests, with the time each phase began, token totals from
// reported usage, and Final: a Final request ends its session when its last
// in-flight request ends. Optional affinity binds a session to a Worker for
// a TTL, in Hard (must) or Soft (prefer) mode. The clock is injected
// (TableConfig.Now). Removals are reported through TableConfig.OnRemove,
// called after the table's lock is released, so a caller can release the
// session's radix lineage or admission state.
//
// Session ids are untrusted, so the table bounds what a flood of them can
// cost: at most MaxSessions live sessions of ids up to TableConfig.MaxIDLen
// bytes (Begin refuses longer ones with a *RefusedError), and parent links
// at most MaxLineageDepth (64) deep: a session whose parent chain is deeper
// keeps its Parent id but is not linked, so linking and Root walk at most
// 64 steps. A flood of 1M distinct ids, each naming the previous one as its
// parent, costs a flat 0.8-1.7 µs per Begin+End (BenchmarkTableFlood; the
// unbounded walk made that quadratic).
//
// Worker is a plain {ID, DPRank} pair so that this package does not import
// flashindex; the root router converts between the two.
//
// # Thread safety and ownership
//
// Extractor is immutable after New and safe for concurrent use (its
// counters are atomic). FromRequest never keeps the body slice, and the
// AgentContext it returns never aliases it. Table is safe for concurrent
// use; RawTable is its unlocked core for callers that serialise access
// themselves (one goroutine, or their own lock). Slices returned by
// Children are the caller's.
package session
