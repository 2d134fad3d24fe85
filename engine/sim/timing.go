package sim

import (
	"fmt"
	"time"
)

// Timing is the step-time model of a simulated engine. One scheduler step
// (one forward pass over a continuous batch) takes
//
//	t = StepOverhead + PerSequence·seqs
//	  + max(LinearFloor, PerToken·tokens)
//	  + Σ over scheduled sequences max(AttnPer1kPairs·pairs/1000, KVReadPer1kTokens·context/1000)
//	  + HostLoadPer1kTokens·hostLoadedTokens/1000
//	  + PeerLoadPer1kTokens·peerLoadedTokens/1000
//
// where tokens is the number of tokens the step computes (prefill chunks
// plus one per decoding sequence), a sequence that computes c tokens on top
// of p already-computed ones attends over pairs = c·p + c(c+1)/2
// (query, key) pairs and reads context = p + c tokens of KV, and
// hostLoadedTokens are prefix-cache hits copied back from the host tier
// (and blocks a Prefetch hint copied), peerLoadedTokens blocks a Share hint
// copied from another worker.
// It is a roofline: linear layers cost the larger of streaming the weights
// once and their compute; attention costs the larger of its FLOPs and its
// KV reads.
//
// The zero Timing means [Llama3_8B_A100]. Costs per 1000 units keep the
// sub-nanosecond constants exact in integer arithmetic, so step times are
// bit-identical on every platform.
type Timing struct {
	// StepOverhead is the fixed CPU cost of a step (scheduling, input
	// preparation, sampling launch).
	StepOverhead time.Duration
	// PerSequence is the CPU cost per scheduled sequence.
	PerSequence time.Duration
	// LinearFloor is the time of the linear layers (QKV, O, MLP, LM head)
	// when they are bound by streaming the weights from HBM: any step
	// costs at least this much.
	LinearFloor time.Duration
	// PerToken is the compute-bound cost of the linear layers per token.
	PerToken time.Duration
	// AttnPer1kPairs is the compute-bound attention cost per 1000 (query,
	// key) token pairs, all layers.
	AttnPer1kPairs time.Duration
	// KVReadPer1kTokens is the memory-bound attention cost of reading 1000
	// tokens of KV cache, all layers.
	KVReadPer1kTokens time.Duration
	// HostLoadPer1kTokens is the cost of copying 1000 tokens of KV from the
	// host tier back to the device (synchronous, on the step that needs
	// them).
	HostLoadPer1kTokens time.Duration
	// PeerLoadPer1kTokens is the cost of receiving 1000 tokens of KV from
	// another worker for a Share hint (synchronous, on the engine's next
	// step).
	PeerLoadPer1kTokens time.Duration
}

// Llama-3-8B (bf16, TP 1) on one NVIDIA A100-SXM4-80GB, served by vLLM.
//
// Sources, and how each constant follows from them:
//
//   - Linear layers: Microsoft Vidur's published operator profile of
//     Meta-Llama-3-8B on A100, data/profiling/compute/a100/meta-llama/
//     Meta-Llama-3-8B/mlp.csv in github.com/microsoft/vidur (Agrawal et al.,
//     "Vidur: A Large-Scale Simulation Framework for LLM Inference",
//     MLSys 2024). Summing the mean times of one layer's operators
//     (input_layernorm, attn_pre_proj, attn_rope, attn_post_proj,
//     post_attention_layernorm, mlp_up_proj, mlp_act, mlp_down_proj, add):
//     0.3039 ms at 1 token and 67.39 ms at 32,768 tokens. Times 32 layers:
//     9.725 ms at 1 token (weight-bound) and 65.81 µs per token at 32,768
//     tokens (compute-bound; ~68 % of the A100's 312 TFLOP/s). The profile
//     has no LM head; its 128,256×4,096 bf16 weights (1.05 GB) streamed at
//     the 1.435 TB/s the 1-token row implies (436 MB of layer weights in
//     0.3039 ms) add 0.732 ms: LinearFloor = 10.457 ms, PerToken = 65.81 µs.
//   - CPU overheads: Vidur's data/profiling/a100/cpu_overheads.csv
//     (Llama-2-7B, TP 1; same vLLM scheduler and sampler): SCHEDULE +
//     SAMPLER_E2E + PREPARE_INPUTS_E2E means are 1.396 ms at batch 8 and
//     3.497 ms at batch 64, a line of 1.096 ms + 37.5 µs per sequence.
//     PROCESS_MODEL_OUTPUTS is left out: vLLM V1 detokenizes in a separate
//     process, overlapped with the GPU.
//   - Attention FLOPs: 4·head_dim·heads·layers = 4·128·32·32 = 524,288 FLOPs
//     per (query, key) pair; FlashAttention-2 (Dao, ICLR 2024) reports its
//     forward pass at 50-73 % of the A100's 312 TFLOP/s bf16 peak; the low
//     end, 156 TFLOP/s, gives 3.361 ns per pair.
//   - KV reads: 2 (K, V) · 32 layers · 8 KV heads · 128 · 2 bytes = 131,072
//     bytes per token, read at the same measured 1.435 TB/s: 91.34 ns per
//     token.
//   - Host loads: 131,072 bytes per token over PCIe 4.0 x16 at 25 GB/s
//     (the usual achieved rate of its 32 GB/s): 5.243 µs per token.
//   - Peer loads (Share hints): the same 131,072 bytes per token over one
//     200 Gb/s HDR InfiniBand NIC per GPU (the DGX A100's compute fabric),
//     25 GB/s: 5.243 µs per token. The source's side of the transfer is not
//     charged.
//
// The KV capacity to pair with it is [Llama3_8B_A100_KVTokens].
var Llama3_8B_A100 = Timing{
	StepOverhead:        1096 * time.Microsecond,
	PerSequence:         37500 * time.Nanosecond,
	LinearFloor:         10457 * time.Microsecond,
	PerToken:            65810 * time.Nanosecond,
	AttnPer1kPairs:      3361 * time.Nanosecond,
	KVReadPer1kTokens:   91340 * time.Nanosecond,
	HostLoadPer1kTokens: 5243 * time.Microsecond,
	PeerLoadPer1kTokens: 5243 * time.Microsecond,
}

// Llama3_8B_A100_KVTokens is the KV cache size, in tokens, of Llama-3-8B on
// one A100-80GB under vLLM's default gpu_memory_utilization of 0.9: 0.9 ·
// 85.9 GB − 16.06 GB of weights − ~3 GB of activations and CUDA graphs,
// at 131,072 bytes per token, rounded down: 440,000 tokens (27,500 blocks of
// 16). It is the default device pool of a [Config].
const Llama3_8B_A100_KVTokens = 440_000

func (t Timing) validate() error {
	for _, d := range [...]time.Duration{t.StepOverhead, t.PerSequence, t.LinearFloor, t.PerToken,
		t.AttnPer1kPairs, t.KVReadPer1kTokens, t.HostLoadPer1kTokens, t.PeerLoadPer1kTokens} {
		if d < 0 {
			return fmt.Errorf("%w: negative timing constant %v", ErrConfig, d)
		}
	}
	return nil
}

// StepWork describes what one step computes, the input of [Timing.Step].
type StepWork struct {
	// Seqs is the number of scheduled sequences; Tokens the tokens they
	// compute in total.
	Seqs, Tokens int64
	// AttnPairs sums each sequence's (query, key) pairs; KVTokens sums each
	// sequence's context (computed + new tokens).
	AttnPairs, KVTokens int64
	// AttnNanos is Σ max(pairs·AttnPer1kPairs, context·KVReadPer1kTokens)/1000
	// per sequence, accumulated with [Timing.AttnCost].
	AttnNanos int64
	// HostTokens is the number of tokens loaded from the host tier.
	HostTokens int64
	// PeerTokens is the number of tokens received from other workers.
	PeerTokens int64
}

// AttnCost returns the attention time, in nanoseconds, of one sequence that
// computes c new tokens after p already-computed ones.
func (t Timing) AttnCost(p, c int64) int64 {
	pairs := c*p + c*(c+1)/2
	flops := pairs * int64(t.AttnPer1kPairs) / 1000
	reads := (p + c) * int64(t.KVReadPer1kTokens) / 1000
	return max(flops, reads)
}

// Step returns the duration of a step doing w.
func (t Timing) Step(w StepWork) time.Duration {
	ns := int64(t.StepOverhead) + w.Seqs*int64(t.PerSequence)
	ns += max(int64(t.LinearFloor), w.Tokens*int64(t.PerToken))
	ns += w.AttnNanos
	ns += w.HostTokens * int64(t.HostLoadPer1kTokens) / 1000
	ns += w.PeerTokens * int64(t.PeerLoadPer1kTokens) / 1000
	return time.Duration(ns)
}
