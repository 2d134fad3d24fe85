// Package loadgen replays an agentic workload live against an
// OpenAI-compatible endpoint (an agentkv proxy, vLLM, SGLang, Dynamo) and
// measures what the server does with it. It is the engine of `agentkv
// replay`, the live counterpart of `agentkv simulate`: one trace.Workload
// (a capture, a Mooncake trace, Claude Code sessions or trace.Synthetic)
// replays as often as you like against a real server.
//
// # What is sent
//
// Prompts are synthesized from the turns' block hash ids (Prompter): block b
// of a prompt is Workload.BlockTokens words derived from a seeded hash of
// HashIDs[b], so equal ids at equal positions give byte-identical text and
// equal tokens, and the server's prefix cache sees the sharing the trace
// recorded; distinct ids share nothing. Words come from 256 common English
// words, each one token with its leading space for the cl100k_base,
// o200k_base and Llama 3 tokenizers (measured: 6,400 random words encode to
// 6,400 tokens in each). Other tokenizers, and the chat template around the
// prompt, make the server's count differ a little: the token count is
// approximate by design, and the server's own usage.prompt_tokens is what
// results report. Config.Seed changes every word, so a run need not reuse a
// previous run's cache. Turns without ids (or past their ids) get words
// unique to the turn.
//
// Each request is {"model", "messages": [one user message] (or "prompt"
// for the completions API), "max_tokens": the turn's OutputTokens (at least
// 1), "stream": true, "stream_options": {"include_usage": true}}, plus
// "ignore_eos": true with Config.IgnoreEOS (vLLM / SGLang), and the session
// headers of the chosen Harness. With API Responses it is Codex's shape,
// {"model", "store": false, "input": [one message with an input_text
// part], "max_output_tokens", "stream": true}, read from response.*
// events (usage from response.completed); with API Messages Claude Code's,
// {"model", "messages", "max_tokens", "stream": true} with
// anthropic-version, read from message_start / content_block_delta /
// message_delta events (prompt tokens = input_tokens +
// cache_read_input_tokens + cache_creation_input_tokens, cached =
// cache_read_input_tokens). API.DefaultHarness names the harness of each
// API. The harness headers:
//
//	dynamo       x-dynamo-session-id, x-dynamo-parent-session-id,
//	             x-dynamo-session-final: true on a session's last turn
//	claude-code  X-Claude-Code-Session-Id: the root session on every request;
//	             a subagent adds x-claude-code-agent-id (its id without the
//	             "ROOT/" prefix) and, when nested, x-claude-code-parent-agent-id
//	codex        session-id (root), thread-id (session),
//	             x-codex-parent-thread-id, x-codex-turn-metadata
//	opencode     x-session-id, x-session-affinity, x-parent-session-id
//
// package session reads each of these back as the workload's own session
// tree (tested). Every request also carries X-Request-Id "SESSION/TURN".
//
// # Schedule
//
// Closed loop (the default for agent traces): a session's turns run in
// order; turn k+1 is sent when turn k's reply has ended, the sessions in its
// WaitFor have finished, and then its Delay has passed. A subagent starts
// Start after its parent's ParentTurn ends and runs concurrently with its
// parent and siblings. Programs (a root session with everything it spawns,
// joined by union with any session it waits for) start in workload order at
// their Start, at most Config.Concurrency at once, as engine/sim's replay
// does. Open loop (Mooncake traces with timestamps): every turn is sent at
// its Arrival, at most Concurrency in flight; a request that had to wait
// records its Lag. Config.Speed divides every delay, offset and arrival.
// MaxRequests stops sending after that many.
//
// # Measurements
//
// Per request (Result): TTFT (to the first event carrying text, reasoning
// or a tool call), end-to-end latency, the server's usage (prompt,
// completion and cached tokens from usage.prompt_tokens_details.cached_tokens
// when reported), finish reason, and failures by kind: HTTP status, timeout
// (Config.Timeout per request, so a run never hangs), connect, transport,
// a reply that broke off, malformed SSE data (counted per event), an error
// event. Failed requests never stop a run or a session. Summarize
// aggregates them (throughput, p50/p99, the hit rate as the server reported
// it); Result.Record renders a trace.Record so that a run written through
// trace.Writer is itself a capture, replayable by trace.ReadFile.
//
// # Clock, cancellation, thread safety
//
// Config.Now and Config.Sleep are injectable: tests drive the schedule with
// a fake clock and never sleep. Run checks the endpoint first (GET
// /v1/models, which also supplies the model when none is named) and fails
// with ErrUnreachable when nothing answers. Cancelling Run's context
// abandons the requests in flight and returns the partial Report with the
// context's error. A Runner is safe for concurrent use (Progress is meant to
// be polled from another goroutine while Run runs); Prompter is an
// immutable value; Result, Report and Summary are plain data owned by the
// caller, except Result.HashIDs, which aliases the workload (read-only).
// Config.OnResult is called concurrently from the request goroutines,
// never under a lock of this package.
package loadgen
