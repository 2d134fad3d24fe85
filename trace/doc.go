// Package trace records, reads, converts and generates the request traces
// that agentkv replays: one capture of an agentic workload can be replayed
// as often as you like, offline against simulated engines or live against
// an endpoint.
//
// # The model
//
// Every reader produces a Workload: Sessions (agent programs) of Turns
// (model calls). A turn has token counts, the hash ids of its prompt's
// blocks (equal ids at equal positions mean equal KV content; a partial
// last block has its own id, so len(HashIDs) == ceil(InputTokens /
// BlockTokens)), the think or tool time before it (Delay), and the child
// sessions it waits for (WaitFor). A subagent is a Session with a Parent,
// spawned when the parent's turn ParentTurn finishes and starting Start
// after it. Closed-loop turns arrive Delay after their dependencies end
// (the previous turn and, with WaitFor, the last listed child); open-loop
// workloads (Mooncake) arrive at fixed Turn.Arrival times. Schedule lays a
// workload out on an uncontended nominal engine (TimingModel), which
// InfiniteCacheCeiling, Summarize, WriteMooncake and the timelines use.
// Validate checks the invariants, dependency cycles included.
//
// # Records and the writer
//
// Record is one line of a request trace, field for field Dynamo's
// dynamo.request.trace.v1 (looked up in ai-dynamo/dynamo,
// lib/llm/src/request_trace/types.rs and agent_context.rs, and the
// "Request Replay Tracing" docs):
//
//	schema "dynamo.request.trace.v1", event_type (request_end, tool_start,
//	tool_end, tool_error, request_payload), event_time_unix_ms,
//	event_source (dynamo | harness),
//	agent_context {session_id, parent_session_id, session_final, session_inferred},
//	request {request_id, x_request_id, model, input_tokens, output_tokens,
//	  cached_tokens, request_received_ms, prefill_wait_time_ms,
//	  prefill_time_ms, ttft_ms, total_time_ms, avg_itl_ms, kv_hit_rate,
//	  kv_transfer_estimated_latency_ms, queue_depth,
//	  worker {prefill_worker_id, prefill_dp_rank, decode_worker_id, decode_dp_rank},
//	  replay {trace_block_size, input_length, input_sequence_hashes},
//	  finish_reason_metadata {finish_reason, backend_finish_reason,
//	    stop_reason, tool_calls [{choice_index, tool_call_index, id, name}]}},
//	tool {tool_call_id, tool_class, started_at_unix_ms, ended_at_unix_ms,
//	  status, duration_ms, output_tokens, output_bytes, error_type},
//	payload {request_id, endpoint, model, request, response, payload_complete}
//
// input_sequence_hashes are Dynamo's sequence hashes with the partial last
// block included (Dynamo's replay.rs hashes the tail's tokens as one more
// local block), so there are ceil(input_length / trace_block_size) of them.
// agentkv adds request.admission {queued_ms, pauses, paused_ms, resumed}
// for admission-control decisions; Dynamo's readers ignore unknown request
// fields (its agent_context denies unknown fields, so nothing is added
// there). Dynamo also accepts records wrapped as {"timestamp", "event"},
// and so does Record.UnmarshalJSON.
//
// Traces are content-free by default: a record has no prompt, response or
// tool arguments, only counts, timings, hashes and tool names. Payload is
// written only when WriterConfig.IncludeContent is set; otherwise it is
// dropped and request_payload records are skipped (and counted).
//
// Writer is asynchronous: Write encodes the record (allocation-free) into
// an in-memory batch under a mutex and returns; a background goroutine
// compresses (none, gzip as Dynamo's default sink, or zstd) and writes
// full batches, rolls segments by uncompressed size at record boundaries
// (PATH.000000.jsonl.gz, ...), and flushes on a ticker (injectable). The
// queue is bounded (QueueBytes): when it is full Write returns ErrDropped
// and counts the record; it never waits for I/O. Close writes every
// accepted record, closes the segment and reports the first sink error.
//
// # Readers
//
//   - ReadDynamo / ReadDynamoFiles / DynamoWorkload: our records and
//     Dynamo's, following Dynamo's agentic lowering (sessions from
//     agent_context, launch at the parent's last request that ended before
//     the child, join at its first request after the child ended, residual
//     delays); context-free traces are open-loop.
//   - ReadMooncake: Mooncake JSONL as AIPerf's mooncake_trace loader reads
//     it (timestamp ms, input_length, output_length, hash_ids, optional
//     session_id grouping turns and delay ms after the previous turn); the
//     block size is not in the file (512 by default). Rows without
//     session_id are single-turn sessions "#LINE".
//   - ReadClaudeCode: kv-cache-tester Claude Code sessions (one JSON object
//     per file, 64-token full-block hash ids local to the file, think_time
//     gaps, subagents with nested requests). A subagent entry's t is when it
//     returned; it started t - duration_ms (verified on trace_0277: the
//     three Explore subagents start 0.7 s after the first turn ends).
//   - Read / ReadFile detect the format and decompress gzip or zstd.
//
// Readers never panic on bad input: errors are *ParseError with the file,
// the line and, inside a line, the JSON path of the offending value.
//
// Writers: WriteMooncake (session_id, timestamp, delay; subagents become
// sessions of their own), PlanRecords (a Dynamo trace of the nominal plan),
// WriteChromeTrace (a Perfetto / chrome://tracing timeline with one track
// per session and subagent and prefill, decode, tool, think, queued and
// paused spans, from PlanSpans or recorded RecordSpans).
//
// Tile makes N copies of a workload with distinct hash namespaces and
// staggered starts; Merge combines files whose ids are local.
//
// # The synthetic workload
//
// Synthetic generates the CLI's default agentic workload from a seed.
// Its defaults were fitted to the 23 public Claude Code sessions with
// FitClaudeCode (log-normal fits by the mean and deviation of logs;
// TestFitMatchesDefaults re-measures them):
//
//	parameter              fitted value            what
//	SystemTokens           15,040                  shared system prompt + tools (median)
//	FirstPrompt            median 3,100, σ 1.69    first user message beyond it
//	Turns                  median 4.86,  σ 0.39    model calls per root session
//	Append                 median 808,   σ 1.96    context growth per turn beyond the last output
//	Output                 median 269,   σ 1.01    completion tokens
//	ToolGap                median 9.15 s, σ 1.57   gap after tool calls (heavy tail, capped 10 min)
//	UserGap                median 92.3 s, σ 1.31   gap after the agent hands back
//	StopProb               0.092                   non-final root turns that end the agent's turn
//	SpawnProb              0.0204                  non-final root turns that launch subagents
//	FanOut                 median 1.73,  σ 0.55    subagents per launch (1 and 3 observed)
//	SubagentSystemTokens   8,423                   subagents' shared prompt
//	SubagentPrompt         median 3,381, σ 0.06    subagent task prompt
//	SubagentTurns          median 9.73,  σ 0.54    subagent model calls
//
// Only one of the 23 sessions has subagents (trace_0277, four), so the
// subagent parameters rest on four samples. The size defaults (256 root
// sessions starting within 60 s, at most 24 turns, 200k-token contexts)
// keep a default simulation small: 1,550-1,780 requests for seeds 1-3
// (20-47 subagents, 37k input and 430-470 output tokens on average, an
// 83-84 % infinite-cache ceiling by blocks).
//
// # Thread safety and ownership
//
// Writer is safe for concurrent use; Write copies what it needs, so the
// caller may reuse the Record. Everything else is plain data and pure
// functions: a Workload, Plan or Record is not safe for concurrent
// mutation. Readers return fresh workloads the caller owns; HashIDs slices
// may be shared between turns (and, in Mooncake, one backing array per
// file), so treat them as read-only. ReadRecords reuses its Record between
// callbacks.
package trace
