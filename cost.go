package agentkv

import (
	"fmt"
	"math"
)

// CostConfig holds the weights of the routing cost function. The zero value
// means Dynamo's defaults; see each field.
type CostConfig struct {
	// OverlapWeight multiplies device-resident prefix blocks. Zero means 1.
	OverlapWeight float64
	// HostWeight and DiskWeight multiply prefix blocks found on the host
	// (pinned CPU) and disk tiers beyond the device prefix. Zero means 0.75
	// and 0.25. Use a negative value to give a tier no credit.
	HostWeight float64
	DiskWeight float64
	// SharedWeight multiplies the shared-pool (Mooncake) pages beyond the
	// worker's own prefix. Zero means 0.5: a shared-pool page must still be
	// fetched over the network, so it is worth less than a host page.
	SharedWeight float64
	// RequestWeight multiplies the worker's requests in flight. Zero means 0
	// (Dynamo's selector counts load through prefill and decode blocks);
	// a small value breaks ties towards idle workers.
	RequestWeight float64
	// Temperature 0 picks the cheapest worker (ties broken uniformly at
	// random); above 0 samples a softmax over min-max normalised costs.
	// Negative values are rejected.
	Temperature float64
}

func (c CostConfig) withDefaults() CostConfig {
	if c.OverlapWeight == 0 {
		c.OverlapWeight = 1
	}
	if c.HostWeight == 0 {
		c.HostWeight = 0.75
	}
	if c.DiskWeight == 0 {
		c.DiskWeight = 0.25
	}
	if c.SharedWeight == 0 {
		c.SharedWeight = 0.5
	}
	for _, p := range []*float64{&c.HostWeight, &c.DiskWeight, &c.SharedWeight, &c.RequestWeight} {
		if *p < 0 {
			*p = 0
		}
	}
	return c
}

func (c CostConfig) validate() error {
	for name, v := range map[string]float64{
		"OverlapWeight": c.OverlapWeight, "Temperature": c.Temperature,
	} {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("agentkv: CostConfig.%s must be a finite value ≥ 0, got %v", name, v)
		}
	}
	for name, v := range map[string]float64{
		"HostWeight": c.HostWeight, "DiskWeight": c.DiskWeight,
		"SharedWeight": c.SharedWeight, "RequestWeight": c.RequestWeight,
	} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("agentkv: CostConfig.%s must be finite, got %v", name, v)
		}
	}
	return nil
}

// Cost is the breakdown of one worker's routing cost, in blocks.
type Cost struct {
	// PrefillBlocks is (active prefill tokens + this request's uncached
	// tokens) / block size.
	PrefillBlocks float64
	// Credit is the weighted overlap: device, host, disk and shared blocks.
	Credit float64
	// DecodeBlocks is the worker's active decode load in blocks.
	DecodeBlocks float64
	// Requests is the worker's requests in flight times RequestWeight.
	Requests float64
	// Logit is max(0, PrefillBlocks − Credit) + DecodeBlocks + Requests:
	// lower is better.
	Logit float64
}

// costInput is what the cost function needs about one candidate worker.
type costInput struct {
	blockSize           int
	requestTokens       int
	device, host, disk  int // exclusive prefix depths in blocks
	shared              int // shared-pool blocks beyond the worker's own prefix
	activePrefillTokens int
	decodeBlocks        int
	requests            int
	prefillFirst        bool // Override.PrefillFirst: decode blocks weigh PrefillFirstDecodeWeight
}

// cost evaluates Dynamo's default selector cost for one worker:
//
//	prefill = (active_prefill_tokens + request_tokens) / bs
//	credit  = w·device + 0.75·host + 0.25·disk + shared_mult·shared
//	logit   = max(0, prefill − credit) + decode_blocks + w_req·requests
//
// As in Dynamo's DefaultWorkerScorer, the raw prefill counts the whole
// prompt and every cached block (on any tier) is discounted through the
// credit term once.
func (c CostConfig) cost(in costInput) Cost {
	bs := float64(in.blockSize)
	var k Cost
	k.PrefillBlocks = float64(in.activePrefillTokens+in.requestTokens) / bs
	k.Credit = c.OverlapWeight*float64(in.device) + c.HostWeight*float64(in.host) +
		c.DiskWeight*float64(in.disk) + c.SharedWeight*float64(in.shared)
	k.DecodeBlocks = float64(in.decodeBlocks)
	if in.prefillFirst {
		k.DecodeBlocks *= PrefillFirstDecodeWeight
	}
	k.Requests = c.RequestWeight * float64(in.requests)
	k.Logit = math.Max(0, k.PrefillBlocks-k.Credit) + k.DecodeBlocks + k.Requests
	return k
}

// selectIndex picks a candidate from logits: argmin with uniform tie-break
// at temperature 0, else a softmax over min-max normalised logits. rnd
// returns a float in [0, 1).
func selectIndex(logits []float64, temperature float64, rnd func() float64) int {
	if len(logits) == 0 {
		return -1
	}
	lo, hi := logits[0], logits[0]
	for _, l := range logits[1:] {
		lo = math.Min(lo, l)
		hi = math.Max(hi, l)
	}
	if temperature == 0 || hi == lo {
		// Uniform among the minima: reservoir sampling over ties.
		pick, n := -1, 0
		for i, l := range logits {
			if l == lo {
				n++
				if pick < 0 || rnd()*float64(n) < 1 {
					pick = i
				}
			}
		}
		return pick
	}
	var sum float64
	weights := make([]float64, len(logits))
	for i, l := range logits {
		w := math.Exp(-((l - lo) / (hi - lo)) / temperature)
		weights[i] = w
		sum += w
	}
	x := rnd() * sum
	for i, w := range weights {
		if x < w {
			return i
		}
		x -= w
	}
	return len(logits) - 1
}
