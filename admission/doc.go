// Package admission is program-aware admission control for agentic LLM
// inference, after ThunderAgent (and NVIDIA Dynamo's port of it): instead of
// admitting isolated requests, it admits, pauses and resumes whole programs
// (agent sessions) at tool boundaries, so that every live program's KV cache
// stays resident instead of thrashing.
//
// # Model
//
// A program is keyed by its session id. Its Phase is Reasoning while a
// request (a model turn) is in flight and Acting between requests, while the
// agent runs a tool. Its Lifecycle is Active (placed on a worker, its tokens
// count there), Paused (off every worker), or Terminated (forgotten). A new
// program that found no room is Paused and never placed: Status reports it
// as StatusQueued. The program's token total is the engine-reported
// prompt + completion of its last turn (EndRequest), or the exact prompt
// length given at a request start; it is never estimated from bytes.
//
// Transitions come from three events and one clock:
//
//	StartRequest(now, id, promptTokens)  → Reasoning; runs, or is held
//	EndRequest(now, id, prompt, compl)   → Acting (a tool boundary)
//	EndSession(now, id)                  → Terminated
//	Tick(now)                            → the control loop, every Interval
//
// A worker is a KV pool identified by a WorkerID (a uint64; the root router
// maps its own worker identity, e.g. flashindex.Worker{ID, DPRank}, to one)
// with a capacity in tokens. Workers may be added, removed and resized at
// any time. Its utilisation is U = Σ weights of its Active programs /
// capacity, a program's weight being its token total (times ActingWeight
// while Acting), or with SetShared its unique tail plus each distinct
// shared prefix once per worker.
//
// # Control loop
//
// Tick(now), with the defaults of Config{}:
//
//   - forced resume: a held turn that has waited 30 minutes is resumed on the
//     least-utilised worker regardless of room, so nothing starves;
//   - resume: on workers with U ≤ 0.95 − 0.10 (the hysteresis), paused
//     programs are bin-packed under that 0.85 ceiling, each needing its
//     tokens plus a 100-token buffer, by the Placement policy: WorstFit (what
//     upstream actually runs), BestFitDecreasing or LeastLoaded, or your own;
//   - pause: on a worker with U ≥ 0.95, the smallest Acting programs are
//     paused until U ≤ 0.80. An in-flight turn is never preempted: with no
//     Acting program left, the smallest Reasoning program is marked to pause
//     at its next tool boundary (EndRequest), and marked programs count as
//     future frees, so only as many are marked as the excess needs. (The
//     upstream port does not count them and ends up marking every Reasoning
//     program on the worker.) Marks are withdrawn once U falls to 0.80;
//   - soft demote: a worker with 0.80 ≤ U < 0.95 is in the band; new turns of
//     its programs get priority −2.0 until 1.5 intervals after the last tick
//     that saw it there.
//
// Resumed turns get a +1.0 priority boost (the held turn, or the program's
// next turn if none was held). Priorities are returned to the caller, who
// passes them to the engine's scheduler; the controller itself orders
// nothing by them.
//
// Optional decay (DecayHalfLife > 0, off by default) weighs an Acting
// program by 2^(−t/τ), t its time acting, on the resume side only (resume
// room and forced-resume target), as upstream does; pausing uses undecayed
// weights.
//
// # Admission and fairness
//
// A new program is placed on the least-utilised worker whose load plus the
// program's tokens plus the buffer stays under the resume ceiling (ties: the
// lowest WorkerID), unless some turn is already held, in which case it
// queues behind it: new programs never overtake waiting ones at the door.
// (Upstream admits up to full capacity; using the resume ceiling here keeps
// admission from immediately triggering pauses.) Queued and paused programs
// are then offered to the placement policy in this fair order:
//
//  1. held turns of programs that had been placed before (a paused program
//     whose next turn arrived),
//  2. queued new programs,
//  3. paused programs with no turn held (still Acting),
//
// and within each group fewer tokens first, ties in pause order. Smallest
// first maximises the number of programs resumed per tick; the forced
// resume bounds how long a large program can be passed over.
//
// A router that knows where a new program's prefix is cached passes its
// workers ranked by cache cost to StartRequestOn: the first with room takes
// the program (ReasonPreferred), otherwise placement proceeds as above.
//
// Workers fail. RemoveWorker pauses a worker's programs and resumes at
// once those that fit elsewhere; before that, a router that cannot use a
// running program's worker (failing, or excluded for one request) calls
// Relocate, which moves the program with its turn to the first offered
// worker with room, or to the roomiest one rather than lose the session
// (ReasonRelocated; the next Tick pauses what overcommits).
//
// Two rules keep programs larger than the room under the resume ceiling
// from starving (upstream would make them wait for the 30-minute forced
// resume, and in simulation that cost a third of the throughput when one
// agent's context was a large fraction of a worker's KV cache): such a
// program takes a worker with no programs at all, at admission or at a
// tick (ReasonEmptyWorker), and a worker's only program is never paused or
// marked, since no other program could use the room.
//
// # Beyond upstream: bounded waits, home placement, shared prefixes
//
// These options, off in Config{} (which stays the upstream behaviour), fix
// what upstream gets wrong when the engines are saturated; Agentic returns
// the configuration with them on that the README's study measures and
// agentkv's proxy runs:
//
//   - Waits.MaxWait bounds the wait of a held turn of a program that has run before,
//     without the forced resume's overcommit (which, in simulation, turned
//     30-minute holds into preemption storms). Held turns resume oldest first
//     (aging) instead of smallest first, and a Tick and a turn (the 90th
//     percentile of how long the last 64 turns ran) ahead of MaxWait the
//     program is swapped in (ReasonSwap): on its home worker, or the
//     worker where that pauses least, Acting programs are paused (largest
//     first) until it fits under the resume ceiling; where that cannot make
//     room, Reasoning programs are marked to pause at their tool boundaries
//     (marks the pause target does not withdraw), that worker takes no
//     other resumes in the Tick that marks, and the program resumes the
//     moment the last of them pauses. The forced resume then applies
//     only to a placed program at twice ForcedResume, a safety net for one too
//     large for any worker. A new program waits at the door first come, first
//     served: one that does not fit yet keeps the worker with the most room
//     for itself and smaller newcomers may only backfill the others (without
//     MaxWait they overtake it, and a large one can wait for hours behind
//     them): in a closed loop offering more programs than the workers hold,
//     someone has to wait, and that wait is the admission wait of a program's
//     first turn. While a held turn of a placed program waits, the Placement
//     resumes no queued new program and no paused one with nothing held: it
//     skips what does not fit, so a smaller newcomer would take the room the
//     waiting turn needs and leave it to the swap, which pauses others (in
//     simulation, on the SWE-bench-shaped workload at 128 programs, that made
//     17 K swaps instead of 7 K and a hit rate of 29 % instead of 43 %). A
//     held turn waits at most MaxWait, unless a program marked for it runs
//     a turn longer than the 90th percentile (in simulation the longest
//     later-turn hold was 1.5-2.7 minutes; swapping at the first Tick past
//     MaxWait instead, it was up to 3 minutes 5 seconds, since the marked
//     programs' turns still had to end). That bound
//     holds without overcommitting only if the door has not placed more
//     programs than the workers hold once they have grown: otherwise a
//     swap pauses an Acting program whose next turn then waits for a swap
//     in turn, and every program cycles through holds (in simulation, 256
//     SWE-bench-shaped agents that started at 5-10 K tokens and grew
//     sixfold held their later turns 8-10 minutes each for the first five
//     hours, at 12 % less throughput). Door (with ColdStartPrograms and
//     ActingGrowth, below) keeps the door from that.
//   - Waits.HomeFirst resumes a program on its home worker (where it last ran, so
//     its prefix is cached there) whenever that has room, before the
//     Placement sees it (ReasonHome).
//   - Door sizes programs at the door by what programs grow to,
//     learnt from those that ended (the lower quartile of the last 64
//     final sizes), and keeps room on each worker for its Reasoning
//     programs' growth up to it. Sized by their first prompt, agents that
//     grow from 10 K to 60 K tokens were placed more than the caches hold,
//     and the bounded wait then rotated them through swaps, each losing its
//     cache (in simulation, on the SWE-bench-shaped workload at 256
//     programs: 22.7 K tok/s and a 31 % hit rate, against 32.5 K and 69 %
//     with it). Before eight programs have ended there is nothing to learn
//     from: ColdStartPrograms sizes every program at an equal share of the
//     largest worker's room (eight per worker in Agentic) until then; with
//     ColdStartObserved and ColdStartFloor (Agentic: 1.5 and 16) that share
//     starts at sixteen per worker and tightens toward eight as the running
//     programs grow, to 1.5 times the largest tail so far, so that a rollout
//     batch of small programs offered at once is not held to eight per
//     worker (in simulation, 64 SWE-bench-shaped programs as one batch:
//     makespan 80 against 95 minutes). An
//     Acting program reserves nothing against held turns (a swap may pause
//     it), but Door.ActingGrowth keeps a share of its growth from new
//     programs at the door, so that programs coming back from their tools
//     together find room within MaxWait (in simulation, SWE-bench-shaped at
//     512 programs, an earlier fix sent the turns due back to the door,
//     for up to 75 minutes (p99 5.0), where swaps would have rotated them;
//     with both, no turn waited more than 3.1 minutes, p99 1.2-1.4, at the
//     same throughput).
//   - Door.Probe starts the programs of a batch while they wait at the
//     door. A rollout step offers all its programs at once and ends with
//     its last; the door lets them in by arrival, and a program with an
//     hour-long tool call let in an hour late ends the step an hour late
//     (in simulation, 512 tiled Claude Code sessions, among them 22 copies
//     of one with a 96-minute pause after its third turn: 163 minutes
//     against KV routing's 131, which starts every first turn at once). A
//     program offered in a burst (Burst programs or more within one
//     second) that has waited After runs its held turn
//     anyway as a probe (ReasonProbe: a KindResume with Released, the
//     program staying Paused and unplaced, at the door), and so
//     does each later turn of it while its unique tail is at most Tail;
//     a larger turn waits at the door, where programs that have started
//     go before those that have not (finish what was started), then by
//     first offer. A subagent such a program starts takes its place
//     in line, and runs its first turn as a probe where there is room
//     (its parent waits for it). Probes take at most Share of a worker's room
//     under the resume ceiling (at least one probe), each counted as its
//     unique tail while more than Queue programs a worker wait at the door
//     (else as its whole context), never take it past
//     PauseThreshold (they pause nothing), and wait while a held turn of
//     a placed program is due to be swapped in; their tokens count on the
//     worker until the turn ends. With it the same step took 141
//     minutes (131 with Queue), and the batch makespans over the study's
//     workloads and seeds came within 8 % of the best baseline's instead
//     of 25 % (3.3 % with Queue; README, "Batch mode"). The closed loop's arrivals are not a burst
//     past its first offer, but that offer is one: its probed programs
//     that then waited at the door waited with a later turn instead of
//     their first, and their going first cost 2-3 % of throughput at 512
//     programs. With Door.Probe.Siblings, programs whose first prompts
//     share a prefix past what a quarter of the programs share (the
//     router names it with SetFirstPrefix, from its lineage index: the
//     rollouts of one task) are siblings; while one has been in a single
//     tool call for Siblings, its siblings that have not started probe
//     before every other program, charged their prompt past the shared
//     prefix (the same Claude Code step: 110 minutes, 16 % under KV
//     routing; workloads whose programs share only a system prompt form
//     no group and run as before).
//   - Waits.ResumeOnEnd runs the resume pass when a running program ends, so the
//     room it frees goes to a waiting program at once rather than at the
//     next Tick (in simulation, with every request a program of one turn
//     on overloaded engines, the 5-second wait cost 2.8 % of throughput
//     against KV routing; 1.6 % with it).
//   - Moves let a program between turns move to the worker the router
//     prices cheapest, when its own is Moves.Margin tokens of prefill
//     dearer and no turn waits for room: a turn otherwise waited a minute
//     behind another program's 200 K-token prefill while a worker idled
//     (in simulation, dispatch p99 at 32 programs 48 s, 36 s with it).
//     With SetBacklog (the router reports each worker's queued prefill
//     before every resume pass) a program also moves while turns wait if
//     its own worker has Moves.Margin tokens queued and the target has
//     not, with room under PauseThreshold; and the resume pass places no
//     program on such a worker while another has room (dispatch p99 at 64
//     programs 66 s, 53 s with both, against KV routing's 55 s; 1,024
//     synthetic programs).
//   - SetEngineUsage(worker, tokens) reports the KV the worker's engine
//     holds for requests (vLLM's kv_cache_usage_perc × capacity; the
//     proxy reads it every Tick). What of it the worker's programs did not
//     account for when it came, beyond 5 % of the worker, counts as used
//     when programs are placed, so traffic that bypasses admission takes
//     room too. In the simulated study the engines never ran that far over
//     the programs' token sums (at most 2.6 % of a worker), so it changes
//     nothing there; counting the whole report instead cost 1.6–1.8 % of
//     throughput at 64–128 programs, since a report is a poll old while a
//     program that ended frees its room at once.
//   - StartSubRequest starts a subagent: placed with its parent when there
//     is room, and never queued behind new programs at the door, since its
//     parent waits for it; held, it counts as a running program's turn.
//
// SetShared(id, shared, key) tells the controller that the first shared
// tokens of a program's context are a prefix named key that other programs
// share (a system prompt and tools, a parent's context): a worker then
// counts each program's unique tail, and each distinct shared prefix of its
// programs once, since its cache holds one copy. The root router calls it
// at every request end with the session-prefix indexer's split (radix).
// SetFirstPrefix(id, shared, key) names, once, the prefix a new program's
// first prompt shares with the programs known before it; the root router
// calls it at the first turn with its lineage index's junction, and
// Door.Probe.Siblings groups programs by it (weights are untouched).
//
// # Groups: tenants at the door
//
// Config.Groups shares the door between groups of programs (the gateway's
// tenants: a program's group is the tenant its session id is scoped by) by
// weighted fair queuing: the k-th program of group g waiting at the door,
// in the door's own order, is tagged (a_g + k) / w_g, a_g being the
// group's programs admitted and w_g its weight, and the door goes by tag,
// then in its own order. One group's rollout batch waiting at the door so
// does not keep another group's new session behind it. Group.MaxAdmitted
// bounds a group's programs admitted at once: past it, its new programs
// wait at the door, run no probe and are never forced in (subagents of its
// running programs are not held, but count). Over the pause threshold, a
// worker pauses first the programs of groups holding more than their
// weighted share of the admitted programs, so a rollout that grows pauses
// its own programs, not another tenant's small session between turns.
// With one group, or without Groups, the door's order and the pauses are
// as above. TestGroupsDoorReference compares the door with a naive
// weighted fair queue.
//
// # Decisions
//
// Every decision (admit, queue, hold, pause, mark, unmark, resume, demote,
// undemote, terminate, cancel) is a Decision record with a Reason, a Seq
// number and the worker's utilisation, for traces and metrics. The
// RawAdmitter passes them to Config.OnDecision synchronously, or buffers
// them for Drain when that is nil.
//
// # Driving it from a simulator or a router
//
// The core is the RawAdmitter: a deterministic, synchronous state machine
// with no locks and no goroutines, taking the time as an argument. A
// discrete-event simulator calls it directly:
//
//	adm, _ := ctl.StartRequest(now, id, prompt)
//	if adm.Run { schedule the turn on adm.Worker with adm.Priority }
//	else       { hold it until a Decision{Kind: KindResume, Released: true}
//	             for id arrives (from OnDecision or Drain) }
//	ctl.EndRequest(now, id, prompt, completion)  // at the turn's end
//	ctl.Tick(now)                                // every Interval; NextForcedResume
//	                                             // tells when a cap expires
//
// Status(id) answers "may this program's next turn run now?" without
// changing anything: StatusRunnable, StatusPaused, StatusHeld, StatusQueued
// or StatusUnknown (a new program).
//
// A server uses the Admitter, the thin thread-safe wrapper: Admit(ctx, ...)
// blocks until the turn may run and returns ctx.Err() with the held turn
// withdrawn and the program's state as it was if ctx ends first (Cancel on
// the RawAdmitter does the same for simulators); TryAdmit never waits and
// changes nothing when the turn could not run now. Run(ctx, ticks) drives
// Tick from a ticker channel. The Admitter calls Config.OnDecision outside
// its lock, one decision at a time, in Seq order; a callback may call back
// into the Admitter.
//
// # A policy of one's own
//
// Policy is the queue admission surface of Dynamo's router: Admit(req)
// answers Bypass, Ready or Defer; OnEvent(Dispatched{id, worker},
// Completed{id, context tokens}, Aborted{id}, Reconcile{workers}) returns
// the deferred request ids to wake. The host keeps the requests and the
// deferred ones; a Policy keeps only its own state. agentkv's Router takes
// any Policy (agentkv.Config.AdmissionPolicy): it holds what is deferred,
// reports the events, and reconciles at every Tick. Thunder is
// ThunderAgent's policy behind it (a RawAdmitter; a program runs one turn
// at a time, its later requests wait in arrival order); the Router's own
// Config.Admission path drives the RawAdmitter directly, since it also lets
// admission choose the worker.
//
// # Thread safety and ownership
//
// RawAdmitter: not safe for concurrent use. Admitter: safe for concurrent
// use by any number of goroutines. Decision, Admission, Program, WorkerInfo
// and Stats are plain values. Slices returned by Drain, Programs and
// Workers are appended to the caller's dst and belong to the caller. A
// Placement receives scratch slices it may modify during the call and must
// not keep.
//
// # Checked facts
//
// The defaults, the tick order (resume before pause, so a program paused in
// a tick resumes at the earliest in the next), the priority groups of the
// resume order, the selection-then-largest-first placement that upstream
// calls best-fit decreasing but which places on the worker with the most
// room (worst fit), the 1.5-interval demotion window, resume-side-only decay
// and the marking loop that never counts its marks were read from
// ThunderAgent's scheduler/router.py and Dynamo's thunderagent_router
// scheduler.py and program_state.py.
package admission
