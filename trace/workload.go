package trace

import "time"

// Workload is the one model every trace reader produces and every replayer
// consumes: sessions of turns, with think/tool times, dependencies between
// turns, and subagents as child sessions.
//
// A Workload is plain data; it is not safe for concurrent mutation, and
// readers return a fresh Workload the caller owns.
type Workload struct {
	// Name says where the workload came from (a file name, "synthetic").
	Name string
	// BlockTokens is how many tokens one entry of Turn.HashIDs stands for
	// (512 in the Mooncake traces, 64 in the Claude Code traces).
	BlockTokens int
	// OpenLoop is true when turns arrive at fixed times (Turn.Arrival), as in
	// the Mooncake traces, rather than when the previous turn finishes.
	OpenLoop bool
	// Sessions in order of first arrival.
	Sessions []Session
}

// Session is one agent program: a root session, or a subagent (Parent set).
type Session struct {
	ID string
	// Parent is the ID of the session that spawned this one ("" for a root).
	Parent string
	// ParentTurn is the index of the parent's turn whose completion spawns
	// this subagent; Start is then the offset after that turn finishes.
	// For a root session ParentTurn is -1 and Start is the offset from the
	// start of the workload.
	//
	// A subagent whose ParentTurn is -1 starts Start after its parent
	// session starts (a reader only produces this when the source shows a
	// subagent launched before the parent's first model call).
	ParentTurn int
	Start      time.Duration
	Turns      []Turn
	// SystemTokens is the size of the session's system prompt and tool
	// definitions when the source says (Claude Code traces, the synthetic
	// generator); 0 when unknown. Informational: the prompt blocks are
	// already part of every turn's HashIDs.
	SystemTokens int
	// Agent names the kind of agent, when known (a Claude Code subagent's
	// subagent_type such as "Explore", "synthetic-subagent"); "" otherwise.
	Agent string
}

// Turn is one model call of a session.
type Turn struct {
	// Delay is the think or tool time between the end of the previous turn
	// (or the session's start, for the first turn) and this turn's arrival,
	// in closed-loop replay. When WaitFor is non-empty, Delay counts from
	// the later of the previous turn's end and the end of the last listed
	// child session (Dynamo's "residual delay after the latest dependency").
	Delay time.Duration
	// Arrival is the absolute arrival time from the workload's start, in
	// open-loop replay (Workload.OpenLoop). Readers of closed-loop sources
	// also fill it with the recorded arrival when the source has one;
	// closed-loop replayers ignore it.
	Arrival time.Duration
	// InputTokens and OutputTokens are the prompt and completion lengths.
	InputTokens  int
	OutputTokens int
	// HashIDs identify the prompt's blocks of Workload.BlockTokens tokens, in
	// order; equal ids at equal positions mean equal content. A partial last
	// block has its own id, so len(HashIDs) == ceil(InputTokens/BlockTokens)
	// for every reader in this package (the Claude Code reader adds a fresh
	// id for the partial tail its source leaves out). A source without
	// block ids leaves HashIDs empty. HashIDs may be shared between turns
	// and workloads (Tile copies them); treat them as read-only.
	HashIDs []uint64
	// WaitFor lists the IDs of child sessions that must finish before this
	// turn may start (a parent waiting for its subagents); empty when the
	// turn depends only on the previous one.
	WaitFor []string
	// ToolCalls names the tools the turn's response called, if known.
	ToolCalls []string
	// FinishReason is why the model stopped, in OpenAI / Dynamo terms:
	// FinishToolCalls (the harness runs tools, then the next turn comes),
	// FinishStop (the agent handed control back to its user), FinishLength,
	// or "" when the source does not say.
	FinishReason string
}

// Finish reasons used in Turn.FinishReason.
const (
	FinishToolCalls = "tool_calls"
	FinishStop      = "stop"
	FinishLength    = "length"
)
