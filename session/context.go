package session

import "context"

// Harness names reported in AgentContext.Harness by the built-in rules.
const (
	HarnessDynamo       = "dynamo"       // only the canonical x-dynamo-* headers
	HarnessClaudeCode   = "claude-code"  // Anthropic Claude Code
	HarnessCodex        = "codex"        // OpenAI Codex CLI
	HarnessOpenCode     = "opencode"     // sst OpenCode
	HarnessThunderAgent = "thunderagent" // program_id in the JSON body
	HarnessSGLang       = "sglang"       // the SGLang model gateway's X-SMG-Routing-Key
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
