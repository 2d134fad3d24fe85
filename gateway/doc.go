// Package gateway is agentkv's front door: an http.Handler that serves the
// APIs coding agents and RL rollout workers speak, over an agentkv.Router
// and its vLLM-compatible workers.
//
// # What it serves
//
//	OpenAI     POST /v1/chat/completions   (OpenCode, most clients)
//	           POST /v1/completions
//	           POST /v1/responses          (Codex: wire_api = "responses")
//	           GET  /v1/models             (Anthropic's shape when anthropic-version is sent)
//	Anthropic  POST /v1/messages           (Claude Code; ?beta=true is accepted)
//	           POST /v1/messages/count_tokens
//
// each streaming and not. A worker declares the APIs it serves natively
// (Worker.Native; Baseline, chat and text completions, when zero): those
// requests are passed through byte for byte. Responses and Messages
// requests to a worker that lacks them are translated to chat completions
// and the reply (JSON or SSE) is translated back, including tool calls,
// tool results, system prompts, stop reasons and usage, so any
// OpenAI-compatible engine serves Codex and Claude Code (package
// gateway/translate holds these translations as pure functions over bytes):
//
//	Responses → chat: instructions and developer messages → system
//	  messages; input_text/output_text parts → text; input_image →
//	  image_url; function_call items → the assistant's tool_calls;
//	  function_call_output → tool messages; function tools → functions;
//	  custom (free-form) tools → a function taking {"input": string}, turned
//	  back into custom_tool_call items; reasoning items and built-in tools
//	  are dropped; max_output_tokens → max_tokens. previous_response_id is
//	  refused (400): the gateway keeps no responses, clients send the whole
//	  input (store=false), as Codex does.
//	chat → Responses: a message item with output_text, function_call items,
//	  status completed or incomplete (max_output_tokens), usage with
//	  input_tokens_details.cached_tokens; streams as response.created,
//	  response.in_progress, response.output_item.added,
//	  response.content_part.added, response.output_text.delta ... .done,
//	  response.function_call_arguments.delta ... .done,
//	  response.output_item.done, response.completed (each with its
//	  sequence_number).
//	Messages → chat: system (string or text blocks, joined by "\n"), and
//	  system-role messages (Claude Code 2.1 sends them mid-conversation) → a
//	  system message; text and image blocks → parts; tool_use → tool_calls;
//	  tool_result → tool messages ahead of the rest of their turn; thinking
//	  blocks dropped; client tools (input_schema) → functions, server tools
//	  dropped; tool_choice any → "required", tool → the named function;
//	  stop_sequences → stop.
//	chat → Messages: text and tool_use blocks, stop_reason end_turn /
//	  max_tokens / tool_use / stop_sequence, usage with input_tokens
//	  excluding cache_read_input_tokens; streams as message_start, ping,
//	  content_block_start/delta/stop (text_delta, input_json_delta),
//	  message_delta (stop reason and the full usage), message_stop.
//
// # Per request
//
// The body is read (Config.MaxBodyBytes, 413 beyond) and must be one JSON
// object; the agent session comes from the headers and body (package
// session: Claude Code, Codex, OpenCode, Dynamo's x-dynamo-*, ThunderAgent's
// program_id); the prompt is tokenized for routing through its chat form,
// by a worker's in-process Tokenizer (for real models, package hftok: the
// model's tokenizer.json and chat template; a SessionTokenizer, as
// hftok.Chat is, tokenizes a session's turn incrementally, reusing the ids
// of the prompt's unchanged prefix from the session's previous turn; its
// answers are compared with
// the worker's /tokenize in the background, the first and every
// Config.TokenizerCheckEvery-th, and a mismatch turns it off for that
// worker), else a routable worker's /tokenize (the chat template applied
// as the engine will), else the approximation of
// vllm.ApproxTokens (pseudo-tokens of the prompt text: affinity kept,
// overlap credit from KV events lost), counted by source in
// agentkv_gateway_prompt_tokens_source_total; the Router picks a worker
// (Route blocks while admission holds the request); the request is sent on
// with only the headers a worker needs (Authorization, X-Api-Key,
// Anthropic-Version, Anthropic-Beta, X-Request-Id, Accept, and
// X-Data-Parallel-Rank for the chosen rank); the reply's usage (a chat
// stream's final usage chunk, which the gateway asks for with
// stream_options.include_usage; Responses' response.completed;
// Anthropic's message_start and message_delta, cached fields included)
// goes to Decision.Done, the metrics and the trace. Every routed reply
// carries X-Agentkv-Worker (URL), X-Agentkv-Worker-Id (ID/rank) and
// X-Agentkv-Cached-Tokens (what the router expected the worker to hold).
// X-Dynamo-Session-Final: true ends the session (Router.EndSession) after
// its request, on every API.
//
// Errors the gateway produces itself (bad JSON, oversized bodies, unknown
// routes, wrong methods, no workers, a worker that cannot be reached) are
// in the caller's API family: OpenAI's {"error":{"message","type",
// "param","code"}}, or Anthropic's {"type":"error","error":{"type",
// "message"}} for /v1/messages paths and requests with anthropic-version.
// A request refused before routing leaves the router untouched. A worker's
// own error status is passed through when it is in the caller's shape
// (native), else rewrapped.
//
// # Claude Code's billing preamble
//
// Claude Code 2.1 starts every system prompt with a text block
// "x-anthropic-billing-header: cc_version=2.1.332.0b8; cc_entrypoint=sdk-cli;"
// whose last three hex digits follow the conversation's first prompt, so
// no two sessions share even their first KV block. Config.StripBillingHeader
// removes it (StripBilling) before routing and forwarding.
//
// # Failover
//
// The request path reads top to bottom in serve.go (read, translate,
// identify, tokenize, forward, finish); relay.go is one attempt on one
// worker, retry.go the decision to retry or migrate.
// Gateway.forward routes each request to a routable worker (its
// failover.Tracker: /health probes and a circuit breaker per worker, see
// package failover) and serves it with Gateway.attempt, the one forward
// step, whose AttemptResult Outcome is OK, FailedBeforeFirstByte (nothing
// reached the client), CutMidStream (bytes reached the client, then the
// reply broke off or stalled) or ClientGone, with an Err matching ErrConnect,
// ErrStatus, ErrCut, ErrTimeout, ErrClientGone or ErrBadReply (ErrorKind
// names them in metrics and traces). Every attempt reports to its worker's
// breaker and is one router decision, Done before the next attempt.
//
// Every attempt is sent through the tracker (failover.Tracker.Send) and
// has a first-byte deadline scaled by its prompt and the prefill queued
// ahead of it on that worker (and, for a whole reply, its output budget:
// the context left after the prompt) from the worker's observed speed;
// streamed attempts teach the tracker that speed, and a worker whose time
// to first token (normalised by its queue) is far outside its peers', or
// that times out having sent nothing while its /metrics progress counters
// stand still (a wedged worker answers /health but no generation), is
// ejected, and the attempts it still holds retry elsewhere at once; a
// Stack takes an ejected worker out of its router until its ejection ends,
// and /readyz lists ejected workers.
//
// Before the first byte a retryable failure (connect, timeout, a reply
// broken before its first byte, 408/429/5xx) goes to the next-best worker,
// up to the Retry policy's tries, with backoff and jitter. A cut chat
// stream (natively served, or the chat stream behind a translated
// Responses or Messages request) continues on another worker when
// Config.Failover.MigrationLimit allows: the text sent so far becomes the
// assistant message to continue (continue_final_message, max_tokens
// reduced; a stream cut before its first word sends the request again
// whole), the continuation's role chunk is dropped and its chunks go on
// the same client stream. Native streams are passed on whole events at a
// time, so a cut leaves the client at an event boundary. Otherwise a cut
// stream ends with the API's error event (OpenAI error chunk, Responses
// response.failed, Anthropic event: error) and a cut whole reply aborts the
// connection. With no routable worker a request waits up to ReadyWait, then
// gets 503. /healthz is liveness, /readyz readiness (Gateway.Ready).
//
// # RL rollout frameworks

// SGLang's POST /generate and vLLM's POST /inference/v1/generate are
// routed on the token ids sent (exact block hashes, no tokenizer) and
// passed through byte for byte to a worker that serves the API
// (Worker.TokenAPIs; zero: all). To a worker that does not they are
// translated (package gateway/translate, tokens.go): to the other engine's
// token API, or to /v1/completions with a token-id prompt,
// return_tokens_as_token_ids and logprobs, the reply written back in the
// client's shape with the worker's token ids and logprobs exactly, whole or
// streamed. POST /abort_request reaches a passed-through request's worker;
// a request still waiting for its turn, or translated, the gateway ends
// itself (its worker connection closes) with finish reason abort. The rid
// is registered before routing, so an abort finds a waiting request.
// Engine controls (pause, flush, weight updates) fan out to every worker
// (control.go).
//
// The worker registry (registry.go, with a Stack) is SMG's: POST /workers
// {"url", "events", "dp_size", "apis", "token_apis", "hints", "engine"} answers 202
// with Location /workers/{id}; GET /workers/{id} reports joining, ready,
// failed, draining or removed; DELETE /workers/{id} drains (the worker
// leaves the health tracker, so no new request goes to it; once the
// router counts none of its requests in flight it leaves the router, the
// index and admission). POST /add_worker?url= and /remove_worker?url= are
// the SGLang router's older aliases. worker_type other than regular and
// api_key are refused (400: agentkv holds no worker secrets); a URL
// registered twice is 409. An admin key is needed once keys are
// configured. The worker set is copy-on-write: the request path loads it
// without a lock.
//
// # Traces
//
// The gateway reports each attempt's end to the router with its usage,
// the API the request came in on and, for a failure, its ErrorKind
// (agentkv.Usage API and ErrorKind): the router's trace sink
// (agentkv.Config.Trace, StackConfig.Trace) gets them in its content-free
// request_end records (session, parent, tokens, cached tokens, worker,
// TTFT, total time).
//
// # Stack
//
// NewStack assembles the whole router in front of vLLM-compatible workers
// (engine/vllm adapters with capacity from /metrics and KV event
// subscribers, the Router, the Gateway, the tick and refresh loops,
// Prometheus metrics): it is what "agentkv proxy" and examples/proxy serve.
//
// A worker spec's Engine (engine=vllm|sglang) says which engine a worker
// runs. An SGLang worker's events are decoded in SGLang's shape
// (engine/sglang), its capacity read from sglang:max_total_num_tokens, and
// its events also feed a per-worker sglang.Names before the index: the
// map from SGLang's block names (the first 16 hex digits of a block's
// SHA-256 as a signed int64) to the router's XXH3 hashes. Every hint
// envelope for that worker is rewritten through it (sglang.go): explicit
// block targets take SGLang's names, a kv.fetch's from its source's map
// when the receiver does not hold the blocks, the envelope is written
// with signed hashes, and an action no map can name is dropped and
// counted (HintStats.Unnamed). vLLM workers' hints keep the router's
// hashes, which are vLLM's own.
//
// A Gateway and a Stack are safe for concurrent use.
package gateway
