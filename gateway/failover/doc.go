// Package failover keeps a fleet of inference workers serving when some of
// them die, stall or restart: a circuit breaker per worker fed by the
// request path, active health probes, a bounded retry policy with
// exponential backoff and jitter, and the classification of an attempt's
// outcome that drives all three. The gateway consumes it; it has no
// dependency on the router, so any proxy can use it.
//
// # Outcomes
//
// Classify turns what an upstream call returned (its error, the worker's
// status, whether the first byte already reached the client, the client's
// context) into an Outcome of one Kind:
//
//   - Connect: refused, reset or closed before any reply. The worker is
//     presumed dead.
//   - Timeout: dial, TLS or first-byte timeout.
//   - Status: 408, 429 or 5xx before the first byte.
//   - Cut: the reply broke after its first byte reached the client.
//   - ClientGone: the client's context ended (not the worker's fault; the
//     gateway logs it as 499).
//   - OK and Other.
//
// Outcome.Retryable is true before the first byte only, for Connect,
// Timeout and the statuses 408, 429, 500, 502, 503, 504 (the SGLang
// gateway's list): the request then goes to another worker with nothing
// lost. After the first byte a failure can only be migrated (see
// Config.MigrationLimit) or reported to the client as the API's own error
// event. Outcome.WorkerFailure says what counts against the worker's
// breaker: Connect, Timeout, Cut, Other and 5xx; a 429 (busy) or other 4xx
// (the client's fault) counts as a success, ClientGone as nothing.
//
// # Circuit breaker
//
// Breaker is the synchronous core, with time passed in (the SGLang
// gateway's defaults): closed, it opens after FailureThreshold (5)
// consecutive failures; open, it refuses requests for OpenFor (30 s), then
// half-opens; half-open, it lets requests through on trial, closing after
// SuccessThreshold (2) successes in a row and reopening at the first
// failure. Failures reported while open do not extend the open period.
//
// Fast passive ejection: a Connect failure opens the breaker at once
// (BreakerConfig.NoFastEject turns this off), so a killed worker leaves
// routing on the first request that finds it dead, not after five, and not
// a probe interval later. A breaker opened that way half-opens as soon as a
// health probe succeeds again (the process is back); one opened by 5xx,
// timeouts or cut streams waits out OpenFor, since a worker that fails
// requests may well still answer /health.
//
// Ejections grow as Envoy's outlier detection's do: the n-th opening
// lasts n × OpenFor, capped at MaxOpenFor (default 10 × OpenFor), and the
// multiplier n goes down by one for each OpenFor the breaker then stays
// closed. TimeoutThreshold (3) timeouts in a row open it before
// FailureThreshold failures do: a wedged worker, which answers /health
// but never a generation, times out every request. Only timeouts of a
// worker that sent nothing count (Outcome.Sent false): one that streamed
// and then was slow is not silent.
//
// # Wedges confirmed from progress counters
//
// A silent timeout, or a whole reply held past its prefill's deadline with
// nothing sent, starts a check of the worker's engine: its
// OutlierConfig.ProgressPath (/metrics) is read twice, ConfirmWait (1 s)
// apart, and its token counters summed (ParseProgress). Counters that
// advanced mean a busy worker: timeouts alone do not eject it. Counters
// that stood still while it held a request sent before the first read
// eject it (ReasonTimeout) at once, without waiting for TimeoutThreshold;
// a /metrics that cannot be read leaves TimeoutThreshold to decide. A
// timeout ejection cancels the attempts the worker still holds with
// nothing sent (ErrEjected), so they are retried elsewhere at once.
//
// # Outlier ejection from live traffic
//
// Beyond consecutive failures, a worker whose time to first token is far
// outside its peers' is ejected (ReasonLatency): Tracker.ObserveFirstToken
// keeps, per worker, an EWMA of the streamed requests' TTFT divided by
// max(uncached prompt tokens, MinPromptTokens) × (1 + tokens /
// AttentionTokens), i.e. normalised by the prompt's size (attention makes
// a long prompt cost more per token: 32K tokens count twice), and a worker with LatencyMinSamples (10) samples whose
// value is above LatencyFactor (5) × the median of at least two routable
// peers' is ejected. A 128K-token prompt is judged by its size, so a long
// prefill on a healthy worker is not an outlier.
//
// Never more than MaxEjectedShare (1/3, at least one worker) of the
// workers are ejected at once for their outcomes or latency, so a slow or
// failing cluster does not eject itself: past the cap a worker stays
// routable (counted in agentkv_failover_ejections_capped_total). Workers
// ejected because they cannot be reached, and workers probed down, are
// neither capped nor counted.
//
// Every ejection is logged with its reason and counted in
// agentkv_gateway_worker_ejections_total{worker,reason} (reason connect,
// timeout, errors, latency or trial_failed); WorkerStatus shows it
// (Ejected, EjectReason, EjectedUntil). Config.OnEject hears of every
// ejection other than a connect one, and of its end (the breaker
// half-opened: the worker is on trial), so a gateway can take the worker
// out of its router (its capacity, its sessions) and put it back.
//
// # Deadlines
//
// Tracker.Send(worker, Request, cancel) starts an Attempt, whose Deadline
// is how long it may wait for its first byte: FirstByteFloor (2 s) +
// FirstByteFactor (3) × the expected time: the prompt (at least
// MinPromptTokens, with the same attention allowance) and the prefill of
// the attempts on that worker still waiting for their first byte (the
// queue it waits behind), at the worker's observed prefill speed, plus the
// output tokens (0 for a stream, whose first byte is its first token; for
// a whole reply, whose first byte is its last, max_tokens or
// ContextTokens (131,072) less the prompt) at its observed time per token.
// The Attempt's FirstByte feeds the prefill speed and latency ejection
// with its TTFT divided by its own prefill and the queue ahead of it, so a
// busy worker is not taken for a slow one. FirstByteDeadline is the same
// deadline with nothing queued. A worker not yet observed is taken to be
// as fast as the median observed one, or PrefillRate (2,000 tokens/s) and
// TokenTime (50 ms).
//
// # Health probes
//
// Tracker probes GET {base}/health (ProbeConfig.Path) on each worker: every
// Interval (5 s) while it is up; while it is down, unknown or just ejected,
// after MinWait (100 ms), doubling after each failure, up to Interval. A
// Connect or Cut report probes the worker at once, so a worker killed
// under its streams (cuts alone open its breaker only at the fifth) is
// down within a MinWait or so of the first cut. A
// worker is routable from its first good probe (Unknown before: a worker
// down at start is simply waited for, never fatal) and goes down after
// FailureThreshold (2) failed probes in a row, or its first if it was never
// up. A negative Interval turns probes off; every worker is then up and only
// the breakers take workers out.
//
// # Routing
//
// A worker is routable when its health is Up and its breaker is not open.
// Tracker.Allowed lists the routable workers minus the ones a request
// already failed on, ready for agentkv.Override.AllowedWorkers; an empty
// list means none (do not pass it to the router, where empty means any).
// Tracker.Ready (at least one routable worker) is what /readyz reports;
// WaitReady blocks until then.
//
// # Retries
//
// Retry.Do runs an attempt function until it reports done, MaxTries (5)
// attempts were made, or its context ends, sleeping Backoff(n) between
// attempts: InitialBackoff (50 ms) × Multiplier (1.5)^(n−1), capped at
// MaxBackoff (5 s), spread uniformly over ±Jitter (0.2). With the defaults a
// request that fails everywhere gives up after about 400 ms of waiting.
//
// # Metrics
//
// With Config.Registerer, per worker (label worker = ID):
// agentkv_failover_worker_routable, agentkv_failover_worker_health (0
// unknown, 1 up, 2 down) and agentkv_failover_breaker_state (0 closed, 1
// open, 2 half-open), read at scrape time; counters
// agentkv_failover_failures_total{kind}, _breaker_opens_total,
// _retries_total, _migrations_total, _probes_total{result} and
// _ejections_capped_total; agentkv_gateway_worker_ejections_total{reason}.
//
// # Concurrency and clock
//
// Breaker and Outcome are plain values, not safe for concurrent use.
// Tracker and Retry are safe for concurrent use; Tracker runs one probe
// goroutine per worker until Remove or Close. Config.Now and Config.After
// are the clock: tests drive breakers, probe schedules and backoffs with a
// fake one.
package failover
