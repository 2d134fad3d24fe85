package vllm

import (
	"errors"
	"strings"
	"testing"
)

const vllmMetrics = `# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",num_cpu_blocks="None",num_gpu_blocks="661",prefix_caching_hash_algo="sha256",swap_space="4"} 1.0
vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="700",note="a \"quoted\", comma\\nvalue"} 1.0
vllm:cache_config_info_extra{block_size="1",num_gpu_blocks="1"} 1.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
vllm:num_requests_running{engine="0",model_name="m"} 3.0 1700000000000
`

func TestParseCacheConfigs(t *testing.T) {
	cs, err := ParseCacheConfigs(strings.NewReader(vllmMetrics))
	if err != nil {
		t.Fatal(err)
	}
	want := []CacheConfig{{"0", 16, 661}, {"1", 16, 700}}
	if len(cs) != len(want) || cs[0] != want[0] || cs[1] != want[1] {
		t.Fatalf("got %+v, want %+v", cs, want)
	}
	if cs[0].CapacityTokens() != 10576 {
		t.Fatalf("capacity %d", cs[0].CapacityTokens())
	}
}

func TestParseCacheConfigsErrors(t *testing.T) {
	tests := []struct {
		name, text string
		err        error
	}{
		{"absent", "vllm:num_requests_running 1\n", ErrNoMetric},
		{"not profiled", `vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1` + "\n", ErrNoCapacity},
		{"no block size", `vllm:cache_config_info{num_gpu_blocks="10"} 1` + "\n", ErrNoCapacity},
		{"negative", `vllm:cache_config_info{block_size="16",num_gpu_blocks="-3"} 1` + "\n", ErrNoCapacity},
		{"unterminated", `vllm:cache_config_info{block_size="16} 1` + "\n", ErrMetricsSyntax},
		{"no value", `vllm:cache_config_info{block_size="16"}` + "\n", ErrMetricsSyntax},
		{"bad value", `vllm:cache_config_info{block_size="16"} one` + "\n", ErrMetricsSyntax},
		{"unquoted", `vllm:cache_config_info{block_size=16} 1` + "\n", ErrMetricsSyntax},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseCacheConfigs(strings.NewReader(tt.text)); !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
		})
	}
}

func TestParseSamples(t *testing.T) {
	ss, err := ParseSamples(strings.NewReader(vllmMetrics), CacheConfigMetric)
	if err != nil || len(ss) != 2 {
		t.Fatalf("%v, %d samples", err, len(ss))
	}
	if got := ss[1].Labels["note"]; got != "a \"quoted\", comma\\nvalue" {
		t.Fatalf("unescaped label = %q", got)
	}
	ss, err = ParseSamples(strings.NewReader(vllmMetrics), "vllm:num_requests_running")
	if err != nil || len(ss) != 1 || ss[0].Value != 3 {
		t.Fatalf("%v, %+v", err, ss)
	}
	ss, err = ParseSamples(strings.NewReader("sglang:max_total_num_tokens 471258.0\n"), "sglang:max_total_num_tokens")
	if err != nil || len(ss) != 1 || ss[0].Value != 471258 || len(ss[0].Labels) != 0 {
		t.Fatalf("%v, %+v", err, ss)
	}
}
