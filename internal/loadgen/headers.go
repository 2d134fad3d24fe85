package loadgen

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// Header names the harnesses send (as captured from Claude Code 2.1, Codex
// 0.171 and OpenCode 1.18; see package session for how a router reads them).
const (
	hdrDynamoSession    = "X-Dynamo-Session-Id"
	hdrDynamoParent     = "X-Dynamo-Parent-Session-Id"
	hdrDynamoFinal      = "X-Dynamo-Session-Final"
	hdrClaudeSession    = "X-Claude-Code-Session-Id"
	hdrClaudeAgent      = "X-Claude-Code-Agent-Id"
	hdrClaudeParent     = "X-Claude-Code-Parent-Agent-Id"
	hdrCodexSession     = "Session-Id"
	hdrCodexThread      = "Thread-Id"
	hdrCodexParent      = "X-Codex-Parent-Thread-Id"
	hdrCodexTurnMeta    = "X-Codex-Turn-Metadata"
	hdrOpenCodeSession  = "X-Session-Id"
	hdrOpenCodeAffinity = "X-Session-Affinity"
	hdrOpenCodeParent   = "X-Parent-Session-Id"
	hdrRequestID        = "X-Request-Id"
)

// identity is how one session presents itself in headers.
type identity struct {
	id, parent, root   string // session ids, SessionPrefix applied
	agent, parentAgent string // Claude Code agent ids ("" for a root / a root parent)
	agentName          string // Session.Agent
}

// agentID is a subagent's Claude Code agent id: its session id without the
// root's "ROOT/" prefix, so that a router's "<root>/<agent>" is the
// session id again; ids without that prefix are used whole.
func agentID(id, root string) string {
	if rest, ok := strings.CutPrefix(id, root+"/"); ok && rest != "" {
		return rest
	}
	return id
}

// setSessionHeaders writes the harness's session headers for turn k of the
// session into h.
func setSessionHeaders(h http.Header, harness Harness, who *identity, k int, final bool) {
	switch harness {
	case Dynamo:
		h.Set(hdrDynamoSession, who.id)
		if who.parent != "" {
			h.Set(hdrDynamoParent, who.parent)
		}
		if final {
			h.Set(hdrDynamoFinal, "true")
		}
	case ClaudeCode:
		h.Set(hdrClaudeSession, who.root)
		if who.agent != "" {
			h.Set(hdrClaudeAgent, who.agent)
			if who.parentAgent != "" {
				h.Set(hdrClaudeParent, who.parentAgent)
			}
		}
	case Codex:
		h.Set(hdrCodexSession, who.root)
		h.Set(hdrCodexThread, who.id)
		if who.parent != "" {
			h.Set(hdrCodexParent, who.parent)
		}
		meta := struct {
			SessionID string `json:"session_id"`
			ThreadID  string `json:"thread_id"`
			TurnID    string `json:"turn_id"`
			AgentName string `json:"agent_name,omitempty"`
		}{who.root, who.id, strconv.Itoa(k), who.agentName}
		b, _ := json.Marshal(meta) // strings only: cannot fail
		h.Set(hdrCodexTurnMeta, string(b))
	case OpenCode:
		h.Set(hdrOpenCodeSession, who.id)
		h.Set(hdrOpenCodeAffinity, who.id)
		if who.parent != "" {
			h.Set(hdrOpenCodeParent, who.parent)
		}
	}
	h.Set(hdrRequestID, who.id+"/"+strconv.Itoa(k))
}
