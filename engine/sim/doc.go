// Package sim simulates LLM serving engines and replays agentic workloads
// against them on a virtual clock, so routing and admission policies,
// worker counts and cache sizes can be compared on real traces with no
// GPU, far faster than real time (the 59-minute Mooncake conversation trace
// replays on 8 workers in about 6 CPU-seconds).
//
// # The engine
//
// An [Engine] is one simulated vLLM (V1) worker:
//
//   - a device KV pool of Config.DeviceBlocks blocks of Config.BlockSize
//     tokens; blocks are reference-counted, a running request holds its
//     blocks, and a freed block stays in the prefix cache until it is
//     reused. Unreferenced blocks are evicted least recently freed first;
//     a request's blocks are freed tail first, so a sequence loses its tail
//     before its head (vLLM's free order).
//   - an optional host tier of Config.HostBlocks blocks: blocks evicted from
//     the device move there (least recently used out first); a prefix hit
//     on the host is copied back to the device and costs
//     Timing.HostLoadPer1kTokens in the step that needs it.
//   - prefix caching as vLLM does it: a new request takes the longest
//     cached prefix of its block chain (device or host), always leaving at
//     least the last token to compute; blocks are registered in the cache
//     in the step that schedules them.
//   - continuous batching with Config.MaxBatch sequences and
//     Config.MaxBatchedTokens tokens per step: running requests first, in
//     admission order, then waiting ones in arrival order with chunked
//     prefill filling the remaining budget.
//   - preemption by recompute: when a running request cannot get a block,
//     the newest running request is preempted, its blocks freed and it is
//     queued at the front to be recomputed (prompt and generated tokens);
//     no new request is admitted in a step that preempted.
//   - a step-time roofline ([Timing]) whose constants come from public
//     measurements of Llama-3-8B on an A100-80GB ([Llama3_8B_A100]: Vidur's
//     operator profiles, FlashAttention-2's efficiency, hardware data).
//
// Each cache change is sent, in order, as a flashindex.Event to the
// engine's [EventSink] — the path a real engine's KV events take to the
// router: Stored events carry each block's engine hash (its sequence hash)
// and its local hash (HasLocalHash), chained under the parent's engine
// hash, so an index that chains local hashes reproduces the engine hashes;
// Removed events carry engine hashes; both per tier (Device, Host).
//
// # KV hints
//
// An Engine honours KV hints (package kvhint) the way a real engine with a
// host tier would, and implements kvhint.Sink: a router delivers envelopes
// with [Engine.Send], which never blocks, copies what it keeps and queues
// the actions (at most HintConfig.MaxPending envelopes between two steps;
// more are refused with kvhint.ErrQueueFull). The next [Engine.Step] applies
// them first, at its start time, before it schedules anything: grouped by
// session id (ascending) and in arrival order within a session, so that a
// router sending them in map order still gives a deterministic run. The
// [Replay] steps an idle engine at once, at the same virtual time, when the
// router sent it hints (a busy engine applies them when its step ends).
//
// Each action is clipped to HintConfig.Bounds (kvhint.Action.Clip) and
// validated; only block-hash targets are resolved (the engine keeps no
// session → blocks map), ranges and whole-session targets are rejected.
// Limit keeps the root-most blocks. Per kind:
//
//   - Demote (Dest host): the target's cached, unreferenced device blocks
//     move to the host tier now, tail first as eviction would (Removed on
//     the device, Stored on the host), and their device blocks are reused
//     first. Blocks a running request references are marked and move when
//     their last reference drops (deferred). Pinned blocks stay (clipped).
//     Without a host tier, or to disk or external, the hint is rejected.
//     Offloading is free, as the device's own evictions are.
//   - Prefetch (Dest device): target blocks on the host that are not on
//     the device are copied back, root first, as unreferenced cached blocks
//     (most recently used; Stored on the device; the host copy stays),
//     until the first block on neither tier or the free list runs out
//     (clipped). The copy is charged at Timing.HostLoadPer1kTokens to the
//     engine's next computing step — the same synchronous cost a demand
//     host hit pays, so a prefetch changes where blocks are and when the
//     copy is paid, never its price. Dest host is rejected (no colder
//     tier).
//   - Share: target blocks this engine lacks are received, root first,
//     from the first listed source that holds each on its device or host
//     tier (peers found through [Engine.SetPeers]; a Replay connects its
//     engines), into the device (Dest device) or the host tier (Dest host;
//     unspecified: host when there is one), until the first block no source
//     holds or the destination runs out of room. The transfer is charged
//     at Timing.PeerLoadPer1kTokens to the next computing step; the source
//     is not charged. Without peers the hint is rejected.
//   - Pin (TTL): each target block cached on the device gets a lease held
//     as one reference, so it cannot be evicted until now+TTL (virtual
//     time; re-pinning extends it), within HintConfig.MaxPinned blocks
//     (clipped beyond). Pins are leases on spare memory: when a running
//     request would otherwise be preempted, or nothing can be admitted with
//     nothing running, the engine breaks every pin (HintStats.PinsBroken)
//     rather than preempt or stall.
//   - Retain (Priority, TTL): until now+TTL, the target's device blocks are
//     kept in a free list per priority; blocks are reused from the default
//     list first (least recently used first), then from the lowest priority
//     up. When the lease ends a block returns to the default list as just
//     freed.
//   - Release: the target's unreferenced, unpinned device blocks move to
//     the front of the free list (reused first; evicted, they go to the
//     front of the host LRU, or are dropped when the host is full), and its
//     host blocks to the front of the host LRU. Referenced or pinned blocks
//     stay (clipped).
//
// Every action is counted once, under its kind, in Stats.Hints with the
// outcome the engine would reply: rejected (unsupported or invalid),
// missing (none of the target present), deferred (only marked for later),
// clipped (acted on less than asked), accepted; Counts.Blocks sums the
// blocks acted on. Hints can make a parent leave the tiers before its
// child; a block whose parent is on no tier is never published (it is
// dropped from the host, or kept private on the device: no prefix lookup
// could reach it), so the event stream stays consistent.
//
// # Block identities
//
// Workloads name prompt blocks with ids of trace.Workload.BlockTokens
// tokens; [AppendBlockHashes] turns them into engine blocks (splitting or
// merging ids, see blockid.go) and chains them, so equal prefixes share
// blocks and different prefixes never do. Tokens the ids do not cover and
// generated tokens get blocks private to their request. The replay puts
// these hashes on every [Request] (LocalHashes, SeqHashes) so a router can
// look them up in an index fed by the engines' events.
//
// # The replay
//
// A [Replay] runs a trace.Workload against engines through a [Router]:
//
//   - closed loop (the default): a root session starts at its Start; turn
//     k+1 arrives Delay after turn k finishes; a turn with WaitFor arrives
//     Delay after the later of its previous turn and the last listed
//     session; a subagent starts Start after its parent's ParentTurn
//     finishes (or after the parent starts, for ParentTurn −1) and runs in
//     parallel. ReplayConfig.MaxActiveSessions bounds the programs offered
//     at once: the next root session is offered when one ends (a closed
//     loop that refills). ReplayConfig.MaxRunning adds a fixed global
//     concurrency cap at the door: offered programs beyond it wait, in
//     order, and that wait counts in their first turn's Held and TTFT.
//   - open loop (Workload.OpenLoop): every turn arrives at its Arrival.
//
// The router answers each request with a worker or a hold. Held requests
// (a paused program) wait in the replay until Router.Finished or
// Router.Tick (called every ReplayConfig.TickInterval) releases them.
// [Result] reports throughput, steps per minute, prefix hit rate,
// re-prefill tokens, TTFT and end-to-end percentiles, pauses and resumes,
// per-worker utilisation and the makespan; and, in a steady-state [Window]
// (from half a cohort of refills after the start to the last offer, or the
// middle of an open-loop trace's arrivals), the throughput, the goodput
// under ReplayConfig.TTFTSLO and the engines' busy fraction, so the drain
// of a finite workload does not decide them. The wait to be admitted is
// reported apart from dispatch-to-first-token (HoldFirst for programs'
// first turns, HoldLater for the rest, DispatchTTFT), with programs'
// completion times (offer to end).
//
// # Scheduling details
//
// With Config.Priority the engine schedules as vLLM's --scheduling-policy
// priority (V1): the waiting queue by (Request.Priority, arrival), lower
// first, and a running request that cannot grow preempts the running
// request with the largest (priority, arrival) not yet scheduled in the
// step rather than the newest.
//
// A blocked head of the waiting queue is not looked up again on every
// step: the engine remembers how many blocks it lacked and keeps that
// current as blocks enter and leave the free lists, shortening its prefix
// when one of its cached blocks is evicted, and looks it up again only when
// it may fit (see headMemo). The results are identical to re-matching
// (TestHeadMemoChangesNothing) and the cost of a run stays linear in its
// requests (BenchmarkBlockedHead).
//
// Runs are deterministic: the event queue orders ties by insertion, the
// engines iterate slices, and step times are integer arithmetic, so the
// same workload, configuration and router give bit-identical results and
// event streams.
//
// # Ownership and concurrency
//
// Engine and Replay are synchronous and not safe for concurrent use (that
// includes Engine.Send: call it from the goroutine that steps the engine,
// as the replay does); the
// replay calls the router and the event sinks on its own goroutine, one
// call at a time. A sink must copy what it keeps of an event: the engine
// reuses the event and its slices. A request's hash slices are read-only
// and valid until Router.Finished returns for it. StepResult slices are
// valid until the next Step.
package sim
