// Package mock is a mock vLLM worker: an HTTP server that answers the way
// a vLLM server does, on the wire, with no GPU. Behind it, a simulated
// engine (package engine/sim: a paged KV cache with prefix caching, LRU
// eviction, an optional host tier, continuous batching with chunked
// prefill, preemption by recompute, and a step-time model of Llama-3-8B on
// an A100) runs in real time: each step's modelled duration, divided by
// Config.Speedup, passes on the wall clock before its tokens are streamed.
// Use it to run the whole serving stack (gateway, router, agent harnesses,
// `agentkv replay`) on a laptop, in CI and in the examples.
//
// # Starting one
//
//	s, err := mock.Start(mock.Config{Events: "tcp://127.0.0.1:0", Replay: "tcp://127.0.0.1:0", Speedup: 10})
//	...
//	defer s.Close()
//	// s.URL(), s.EventsEndpoint(), s.ReplayEndpoint()
//
// Everything listens on loopback by default, and ":0" ports are chosen
// for you. `agentkv mock-worker` is the same server as a command, and
// `agentkv proxy --mock-workers N` starts N of them in process.
//
// # Endpoints
//
//   - POST /v1/chat/completions, /v1/completions, /v1/responses (OpenAI) and
//     POST /v1/messages, /v1/messages/count_tokens (Anthropic), streaming
//     and not, in each API's exact JSON and SSE shapes (package apiwire):
//     OpenAI chunks, a final usage chunk with stream_options.include_usage,
//     and data: [DONE]; Responses response.created … response.completed
//     with sequence numbers (also when max_output_tokens is reached, the
//     response's status then being "incomplete", as vLLM does); Anthropic
//     message_start … message_stop with ping. Config.APIs limits the APIs
//     served natively; the others answer 404 as an older vLLM does.
//   - POST /tokenize ({prompt} or {messages, tools, add_generation_prompt,
//     continue_final_message}) → {count, max_model_len, tokens,
//     token_strs}, and POST /detokenize ({tokens} → {prompt}), in vLLM's
//     shapes; Server.TokenizeChat gives the same ids in process.
//   - GET /health, GET /v1/models (Anthropic's shape when the request
//     sends anthropic-version), GET /metrics with the vLLM names adapters
//     read: vllm:cache_config_info{block_size, num_gpu_blocks,
//     num_cpu_blocks, ...}, vllm:num_requests_running / _waiting,
//     vllm:kv_cache_usage_perc (and the older gpu_cache_usage_perc), token
//     and prefix-cache counters.
//   - GET and POST /admin/fault: the fault switches (below).
//   - The token-in, token-out APIs of RL rollout frameworks (package
//     internal/tokenapi has their shapes): SGLang's POST /generate (rid,
//     input_ids or text, sampling_params with max_new_tokens (default
//     128), ignore_eos, stop_token_ids; return_logprob, logprob_start_len,
//     top_logprobs_num; streaming as SGLang's cumulative data: chunks and
//     data: [DONE]) answering {text, output_ids, meta_info: {id,
//     finish_reason: {type: stop|length|abort}, prompt_tokens,
//     completion_tokens, cached_tokens, output_token_logprobs:
//     [[logprob, id, null], ...], weight_version}}; and vLLM's POST
//     /inference/v1/generate (token_ids, sampling_params with max_tokens
//     (default 16), logprobs, ignore_eos, stop_token_ids; streaming
//     deltas) answering {request_id, choices: [{token_ids, finish_reason,
//     logprobs: {content: [{token: "token_id:N", logprob}]}}], usage}.
//     Logprobs are deterministic (a multiple of 1/1024 from a hash of the
//     prompt and position), so equal prompts give equal tokens and
//     logprobs. A client that goes away aborts its request.
//   - RL control: POST /abort_request ({"rid"} → that request ends with
//     finish reason abort within one engine step; {"abort_all": true};
//     an unknown rid is a 400) and vLLM's /abort_requests
//     ({"request_ids"}); SGLang's /pause_generation ({"mode": "abort"}
//     by default, "in_place"), /continue_generation, /flush_cache,
//     /update_weights_from_disk|tensor|distributed (they flush and set
//     weight_version), GET /get_weight_version, GET /get_model_info
//     (with vocab_size); vLLM's /pause (?mode=abort|keep,
//     clear_cache=true), /resume, GET /is_paused, /reset_prefix_cache,
//     /sleep, /wake_up, GET /is_sleeping. A flush empties both cache
//     tiers and publishes AllBlocksCleared (the event sequence goes on);
//     it is refused (400) while requests are in flight, as SGLang does,
//     and so are weight updates: pause generation first. While paused no
//     engine step runs and new requests wait.
//   - KV hints (hints.go; Config.Hints): a generation request's "kv_hints"
//     body field (vLLM's and SGLang's) is executed before the request is
//     queued and answered in the X-Kv-Hints-Reply header (a kvhint.Reply,
//     one outcome per action: accepted, clipped, deferred, rejected,
//     missing); POST /kv/hints takes an envelope between requests and
//     answers the Reply. kv.fetch pulls the named blocks from the peer at
//     its source_control_endpoint (the peer's base URL) with POST
//     /kv/blocks, over HTTP, counted and timed; kv.prefetch and kv.demote
//     move blocks between the device and host tiers, kv.pin, kv.retain and
//     kv.deref change eviction (engine/sim's hint machinery), and the KV
//     events show every move. Unknown actions are ignored; a malformed,
//     oversized (Config.Hints.MaxBytes, 1 MiB) or invalid envelope is
//     refused whole and changes nothing; a block or session the worker
//     does not hold is "missing". /metrics adds
//     agentkv_mock_kv_hint_actions_total{kind,outcome} and the
//     agentkv_mock_kv_fetch_* transfer counters.
//
// Bad input gets the API's own error shape (OpenAI {"error":{...}},
// Anthropic {"type":"error",...}, SGLang {"error":{"message"}}): malformed
// JSON 400, an unknown model 404, a body over Config.MaxBodyBytes 413, an
// unknown route 404, a prompt over Config.MaxModelLen 400; on the token
// APIs also non-integer, negative or out-of-vocabulary ids (the
// vocabulary is 2^31 ids), more than tokenapi.MaxIDs ids (2,097,152; the
// decoder stops there, so 10 million ids cost no more), a batch, a rid in
// flight, and aborting an unknown rid.
//
// # Tokens, prompts and replies
//
// Tokens are words (package internal/wordtok): one whitespace-separated
// word is one token, with ids from a hash of the word, so the prompts
// `agentkv replay` synthesizes are as many tokens as words. Chat, Responses
// and Messages requests go through wordtok's chat template (with vLLM's
// add_generation_prompt and continue_final_message; a Messages request
// whose last message is the assistant's continues it), so the same
// conversation is the same tokens through every API.
//
// A reply's length is drawn in [MinOutput, MaxOutput] (default 16–128)
// from a hash of the prompt, and it finishes with "stop" / end_turn —
// unless the request's max_tokens (max_completion_tokens,
// max_output_tokens) is shorter: then the reply is that long and finishes
// with the API's "length" reason (max_tokens, an incomplete response), as
// a model stopped by its limit. Its words come from wordtok.Words, chosen
// by the same hash: equal prompts get equal replies.
//
// The tool-call rule: a request that declares tools (tool choice not
// "none") whose current turn (the messages after the last assistant
// message; system and developer messages do not count) is the user's gets
// one tool call instead of text; a turn that carries a tool result (an
// OpenAI tool message, a Responses function_call_output, an Anthropic
// tool_result block, also when text blocks or a user message follow it)
// gets text. So each user turn has at most one tool call and a harness
// running non-interactively terminates. The tool is the named one, else a
// read-only one (Read, read_file, Glob, LS, list, Grep, ... ; then names
// containing read, list, glob, grep, search or view), else the first; its
// arguments fill every required property of its JSON schema (defaults,
// first enum values, "README.md" for paths, "*" for patterns, "ls" for
// commands, 1, false, one-element arrays).
//
// # The cache is truthful
//
// Usage reports what the simulated cache did: prompt tokens, the prompt
// tokens found cached (device and host tiers) at admission — in
// prompt_tokens_details.cached_tokens, input_tokens_details.cached_tokens,
// or cache_read_input_tokens (input_tokens then excludes them) — and the
// completion tokens. Block hashes are computed from the prompt's tokens
// (and the reply's, which the engine caches too) with flashindex's
// Dynamo-compatible hasher, so a router hashing the same tokens predicts
// exactly the blocks the mock holds.
//
// # KV events
//
// With Config.Events, every engine step's cache changes are published as
// one batch on a ZMQ PUB socket in vLLM's wire format (frames [topic, seq,
// msgpack batch]; BlockStored with the blocks' token ids, BlockRemoved,
// AllBlocksCleared; medium GPU for the device, CPU_PINNED for the host
// tier; the shape chosen by Config.Encoding), and with Config.Replay a
// ROUTER socket serves the buffered batches from a sequence number, as
// vLLM's replay endpoint does. engine/vllm's Subscriber reads it exactly
// as it reads vLLM.
//
// # Fault switches
//
// Faults (Server.SetFaults, Config.Faults, or POST /admin/fault with
// {"fail_status":503,"fail_count":2}, {"cut_after":5}, {"stall_first_ms":
// 2000}, {"stall_mid_ms":500,"stall_after":3}, {"refuse":true,
// "refuse_for_ms":1000}, {"drop_events":1}, {"restart":true},
// {"clear":true}; the body is the new state) make the worker fail before
// the first byte with a status, cut a stream after K tokens (the
// connection closes with no terminator), stall before the first byte or
// mid-stream, refuse connections (the listener closes; reopened on clear
// or after refuse_for), drop event batches (a gap the replay socket can
// fill), or restart with an empty cache (Server.Restart: requests in flight
// fail, AllBlocksCleared is published and the event sequence starts over
// at 0, as a restarted vLLM's does).
//
// # Limits
//
// A chat, completions, Responses or Messages request whose client goes
// away keeps running in the simulation to its end; a token-API request is
// aborted. One prompt per
// request; no n > 1, no logprobs on the OpenAI APIs, no sampling
// (temperature and the like are accepted and ignored); cache_salt is
// accepted and not mixed into the hashes; vLLM's /pause?mode=wait is not
// modelled.
//
// # Thread safety
//
// A Server is safe for concurrent use; its engine is stepped by one
// goroutine.
package mock
