package main

import (
	"fmt"
)

func init() {
	register(&command{
		name:    "simulate",
		summary: "replay an agentic workload against simulated engines and compare policies",
		usage:   "[flags]",
		help: `
Replay an agentic workload against simulated engines through the real router
and compare routing and admission policies across a concurrency sweep.

The simulator (engine/sim) has not landed yet: this command prints the plan of
the default run and exits without simulating anything.`,
		run: runSimulatePlan,
	})
}

func runSimulatePlan(env *cmdEnv, args []string) error {
	c := commands["simulate"]
	fs := newFlags(env, c)
	if err := parseFlags(env, c, fs, args); err != nil {
		return err
	}
	fmt.Fprint(env.stdout, `agentkv simulate: NOT IMPLEMENTED YET - nothing was simulated.

Plan of the default run, once engine/sim lands:
  workload     synthetic agentic sessions (seeded), shaped after real Claude Code
               traces: shared system prompt, growing per-turn context, tool gaps
               with a heavy tail, subagent fan-out
  cluster      a few simulated workers whose KV pools the working set outgrows at
               high concurrency
  sweep        32 ... 512 concurrent agent programs
  policies     round-robin, KV-aware, KV-aware + program-aware admission
  metrics      throughput, prefix hit rate, re-prefill tokens, TTFT / E2E p50/p99,
               pauses and resumes, makespan
  outputs      a table on stdout, results JSON, a throughput / hit-rate plot
`)
	return nil
}
