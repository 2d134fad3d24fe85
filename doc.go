// Package agentkv composes the agentkv packages into an in-process,
// session-aware KV router for agentic LLM inference.
//
// # The request lifecycle
//
// A [Router] holds the KV block index (flashindex), the session table
// (session), the session-prefix lineage (radix), optionally program-aware
// admission (admission), a shared-pool index (sharedpool), hint policies
// (kvhint) and a trace sink (trace). A serving stack uses it in four calls:
//
//  1. [Router.AddWorker] for each engine: a [Worker] reports its ID, DP ranks,
//     block size (which must equal Config.BlockSize: a mismatch is an error,
//     never silent zero overlap) and KV capacity per rank. Each DP rank is a
//     separate routing candidate.
//  2. [Router.ApplyEvent] for every KV event the engine adapters decode
//     (engine/vllm, engine/sglang, engine/sim): the index learns which
//     blocks each worker holds on which tier.
//  3. [Router.Route] (blocking) or [Router.TryRoute] (non-blocking) for each
//     model call, with its tokens (or precomputed sequence hashes) and its
//     session.AgentContext. The [Decision] names the worker and explains why
//     (cached tokens per tier, shared-pool credit, the cost breakdown, the
//     admission outcome). Call [Decision.FirstToken] when the first token
//     streams, [Decision.Progress] while it streams, and [Decision.Done] with
//     the engine's usage when it ends: admission, the session table and the
//     trace learn from real numbers. A request that failed or was cancelled
//     calls Done with Usage.Failed: besides its load, the approximate index
//     entries it added and the session binding it made are undone, so the
//     next route is not drawn to a worker for a cache it lacks.
//  4. [Router.Run] in a goroutine of its own: it calls [Router.Tick] every
//     Config.TickInterval (5 s by default, admission's interval with
//     admission) until its context ends: admission pauses and resumes
//     programs, hint policies run for sessions between turns, and expired
//     sessions, silent requests, approximate index entries and held
//     requests their TryRoute caller abandoned (Config.HeldTTL) are swept.
//     A request that keeps streaming is never swept. Simulators call Tick
//     themselves, on virtual time.
//
// To take a worker out of routing call [Router.RemoveWorker] (its index
// entries and load go; with admission its programs are paused and resumed
// elsewhere) and AddWorker when it is back; to steer one request away from
// a worker that just failed, retry with Override.AllowedWorkers.
//
// # Choosing a worker
//
// With the KVAware policy each candidate's cost is Dynamo's default
// selector, in blocks:
//
//	prefill = (active_prefill_tokens + prompt_tokens) / block_size
//	credit  = w·device + 0.75·host + 0.25·disk + w_shared·shared_beyond_tiers
//	logit   = max(0, prefill − credit) + decode_blocks + w_req·requests
//
// where device, host and disk are the worker's exclusive prefix depths and
// shared_beyond_tiers counts shared-pool pages beyond all three (so a host
// or disk hit is never credited twice). Temperature 0 takes the argmin with
// uniform ties; above 0 a softmax over min-max normalised costs. Session
// affinity (soft or hard, with a TTL), per-request overrides (weights,
// allowed workers) and a busy filter adjust the candidates. RoundRobin and
// Random ignore the cache and exist for comparison; so does GlobalLB,
// VERL's default rollout balancer and the baseline of RL rollouts: a
// session stays on the worker it was first sent to (an LRU of
// GlobalLBSessions sessions), anything else goes to the fewest requests in
// flight.
//
// What the index knows comes from KV events (ApplyEvent). A worker whose
// engine publishes none is invisible to it, so by default (Config.Index's
// zero value, IndexAuto) the router records each decision routed to such a
// worker as approximate index entries and binds the session to it softly,
// until the worker's first event arrives; from then on routing to it is
// exact. IndexExact and IndexApproximate fix either behaviour. A session's
// next turn on the same worker that extends its last records only its new
// blocks (flashindex.Index.RecordTail); its context is refreshed whole
// once a quarter of Config.ApproxTTL has passed since it last was.
//
// An agent turn resends its context plus an append. The router keeps each
// session's last block hashes and a keyed XXH3 fingerprint of every
// 1,024-token chunk of its last prompt (bounded by Config.HashCacheTokens),
// verifies the resent prefix chunk by chunk, reading the new prompt once,
// and hashes only from the first chunk that changed.
//
// # Sessions nobody named
//
// With Config.InferSessions, a request that names no session (its
// Request.Agent is zero) gets one from its prompt's block hashes, after
// hashing: it joins the live inferred session whose context it extends
// (or whose last TailTokens it rewrites), forks one it branches off beyond
// that session's first prompt, or opens a new one; a prompt that matches
// only a prefix several sessions share never joins (README, "How agentkv
// recognises sessions"). Route fills Request.Agent with the inferred
// session (Inferred set, ids under InferredPrefix, which no client may
// send), and it gets affinity, an admission program, lineage, hints and
// traces like a named one; Request.Client keeps inference within one
// client. [Inferrer] and [EvalInference] do the same on traces. Every
// Decision says why its worker was chosen (Decision.Reason: session,
// inferred, prefix, load or held). A compaction (AgentContext.Compaction,
// or session.Info.Compacted) restarts the session's lineage; its program
// goes on.
//
// # KV hints
//
// With Config.Hints the router evaluates the hint policies (kvhint) after
// it picks a worker, at every tick for sessions between turns, and when a
// session ends, and hands the envelopes to workers that take them
// (HintReceiver). What a policy sees of where blocks live is the index's
// answer, plus one thing the router knows before the index does: the
// worker it routed the session's previous turn to holds that turn's prompt
// chain. Within a second of that turn's end (previousSourceWindow), when
// the next turn goes elsewhere and extends the previous prompt, that
// worker is offered as a holder of the shared blocks even if its KV events
// have not arrived yet; a quick agent turn otherwise finds no source to
// name.
//
// # Admission
//
// With Config.Admission set, each session is a program (its ProgramID when
// the client sends one). A turn of a paused program, or a new program with
// no room, is held: Route blocks until a Tick resumes it (or ctx ends: the
// turn is withdrawn and Route returns ctx.Err()); TryRoute returns ErrHeld
// and the caller learns of the release through Config.OnRelease or
// TickResult.Released, then retries with the same Request.ID (a release
// not retried within Config.HeldTTL is dropped). A held request whose
// session ends is reported with ErrDropped. At most Config.MaxHeld requests
// are held at once; beyond that TryRoute and Route return ErrTooManyHeld. New programs are offered
// the workers in cost order, so they land where their prefix is cached.
//
// # Concurrency and ownership
//
// A Router is safe for concurrent use. Route may block on admission; every
// other method returns promptly. The router never calls a Worker, hint sink,
// trace sink or OnRelease while holding its own lock. Hint sinks are called
// on the request path and must not block (wrap them in kvhint.NewQueue).
// The Request's slices are only read during the call; a Decision is owned
// by the caller, and its methods may be called from any goroutine.
//
// # Metrics
//
// [NewMetrics] registers Prometheus metrics: router overhead per stage
// (hash, match, schedule, total), prompt and cached tokens by tier,
// shared-pool credit, admission decisions and queue depth, KV events per
// worker by result (applied or the rejection reason), event gaps, and hint
// actions sent. Warnings go to Config.Logger (log/slog).
package agentkv
