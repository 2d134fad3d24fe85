package session

import "context"

// Harness names reported in AgentContext.Harness by the built-in rules.
const (
	HarnessDynamo       = "dynamo"            // only the canonical x-dynamo-* headers
	HarnessClaudeCode   = "claude-code"       // Anthropic Claude Code
	HarnessCodex        = "codex"             // OpenAI Codex CLI
	HarnessOpenCode     = "opencode"          // sst OpenCode
	HarnessThunderAgent = "thunderagent"      // program_id in the JSON body
	HarnessSGLang       = "sglang"            // the SGLang model gateway's X-SMG-Routing-Key
	HarnessDeepSeek     = "deepseek"          // DeepSeek's harness (x-deepseek-harness-*)
	HarnessPi           = "pi"                // Pi (@mariozechner/pi-coding-agent), openai-responses
	HarnessClientID     = "client-request-id" // a session-shaped x-client-request-id
	HarnessBearer       = "bearer"            // the API key as the session (Config.BearerSession)
	HarnessOpenAIUser   = "openai-user"       // the body's user field
	HarnessSessionParam = "session-params"    // the body's session_params.session_id
	// HarnessInferred marks a session the router inferred from the prompt
	// (no header or body field named one); AgentContext.Inferred is set.
	HarnessInferred = "inferred"
)

// AgentContext is the agent identity of one request. The zero value means
// "no session": the request is routed as an isolated call.
//
// An AgentContext is a plain value; its strings never alias a caller's body
// buffer, so it may be kept after the request ends.
type AgentContext struct {
	// SessionID names the session (an agent's chain of calls). For a Claude
	// Code subagent it is "<root session>/<agent id>".
	SessionID string
	// ParentSessionID names the session that spawned this one ("" for a
	// root). Never equal to SessionID.
	ParentSessionID string
	// Final is set when the client says this request ends the session
	// (x-dynamo-session-final: true).
	Final bool
	// Harness is the rule that supplied SessionID (see the Harness*
	// constants, or a custom Rule's name).
	Harness string
	// AgentID is the harness's own agent name or id: Claude Code's
	// x-claude-code-agent-id, Codex's agent_name.
	AgentID string
	// TurnID is the harness's turn id where it sends one (Codex).
	TurnID string
	// ProgramID is a ThunderAgent program id from the body (program_id or
	// extra_body.program_id); admission control groups requests by it.
	ProgramID string
	// Compaction is set when the request rewrites its session's context
	// under the same identity: Codex's turn metadata request_kind
	// "compaction", Claude Code's x-claude-code-compaction or a request
	// class naming compaction, DeepSeek's x-deepseek-harness-compact, or
	// (reported by Table.Begin in Info.Compacted) a rise of Window. The
	// program continues (admission keeps its accounting); its lineage
	// restarts (the router expects no prefix hit on this turn and lets the
	// old branch age out).
	Compaction bool
	// Window is Codex's window number: the digits after the last ':' of
	// x-codex-window-id (0 when absent or not numeric). Codex opens a new
	// window when it compacts; a rise within a session is a compaction.
	Window uint32
	// Inferred is set when the session was inferred from the prompt's
	// blocks (the router's Infer stage), not named by the request.
	Inferred bool
}

// Valid reports whether the request belongs to a session.
func (ac AgentContext) Valid() bool { return ac.SessionID != "" }

type ctxKey struct{}

// NewContext returns a copy of ctx carrying ac.
func NewContext(ctx context.Context, ac AgentContext) context.Context {
	return context.WithValue(ctx, ctxKey{}, ac)
}

// FromContext returns the AgentContext stored by NewContext or the
// middleware. ok is false when there is none (including refused requests).
func FromContext(ctx context.Context) (ac AgentContext, ok bool) {
	ac, ok = ctx.Value(ctxKey{}).(AgentContext)
	return ac, ok
}

// IDFromContext returns the session id in ctx, or "".
func IDFromContext(ctx context.Context) string {
	ac, _ := FromContext(ctx)
	return ac.SessionID
}
