package vllm

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Metric errors.
var (
	// ErrNoMetric reports that /metrics has no sample of the metric asked for.
	ErrNoMetric = errors.New("vllm: metric not found")
	// ErrNoCapacity reports a cache_config_info series without a usable
	// num_gpu_blocks or block_size (vLLM writes "None" before profiling).
	ErrNoCapacity = errors.New("vllm: no KV capacity in cache_config_info")
	// ErrMetricsSyntax reports a sample line the parser cannot read.
	ErrMetricsSyntax = errors.New("vllm: bad Prometheus text line")
)

// Sample is one series of a metric in the Prometheus text format.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// maxMetricsLine bounds one line of /metrics text.
const maxMetricsLine = 1 << 20

// ParseSamples reads the Prometheus text exposition format from r and
// returns every sample of the metric called name, in order. Comment lines
// and other metrics are skipped unparsed; a malformed line of the wanted
// metric is an error wrapping ErrMetricsSyntax. Label values are unescaped
// (\\, \", \n).
func ParseSamples(r io.Reader, name string) ([]Sample, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxMetricsLine)
	var out []Sample
	for ln := 1; sc.Scan(); ln++ {
		line := strings.TrimLeft(sc.Text(), " \t")
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ' && rest[0] != '\t') {
			continue // a longer metric name with this prefix
		}
		s, err := parseSample(rest)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrMetricsSyntax, ln, err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("vllm: reading metrics: %w", err)
	}
	return out, nil
}

func parseSample(s string) (Sample, error) {
	smp := Sample{Labels: map[string]string{}}
	if s[0] == '{' {
		i := 1
		for {
			for i < len(s) && (s[i] == ' ' || s[i] == ',') {
				i++
			}
			if i < len(s) && s[i] == '}' {
				i++
				break
			}
			eq := strings.IndexByte(s[i:], '=')
			if eq <= 0 {
				return smp, errors.New("label without =")
			}
			key := strings.TrimSpace(s[i : i+eq])
			i += eq + 1
			if i >= len(s) || s[i] != '"' {
				return smp, errors.New("label value not quoted")
			}
			i++
			var b strings.Builder
			closed := false
			for i < len(s) {
				c := s[i]
				i++
				if c == '"' {
					closed = true
					break
				}
				if c == '\\' && i < len(s) {
					switch s[i] {
					case 'n':
						b.WriteByte('\n')
					default:
						b.WriteByte(s[i])
					}
					i++
					continue
				}
				b.WriteByte(c)
			}
			if !closed {
				return smp, errors.New("unterminated label value")
			}
			smp.Labels[key] = b.String()
		}
		s = s[i:]
	}
	f := strings.Fields(s)
	if len(f) == 0 || len(f) > 2 {
		return smp, errors.New("want a value and an optional timestamp")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return smp, err
	}
	smp.Value = v
	return smp, nil
}

// CacheConfigMetric is vLLM's info gauge whose labels describe the KV cache.
const CacheConfigMetric = "vllm:cache_config_info"

// CacheConfig is one engine's KV cache as vllm:cache_config_info reports it
// (one series per engine core; a data-parallel server has one per rank).
type CacheConfig struct {
	Engine       string // the "engine" label, "" if absent
	BlockSize    int
	NumGPUBlocks int
}

// CapacityTokens is NumGPUBlocks × BlockSize.
func (c CacheConfig) CapacityTokens() int { return c.NumGPUBlocks * c.BlockSize }

// ParseCacheConfigs reads /metrics text and returns every
// vllm:cache_config_info series. A series whose num_gpu_blocks or
// block_size is missing or not a positive integer is an error wrapping
// ErrNoCapacity; no series at all is ErrNoMetric.
func ParseCacheConfigs(r io.Reader) ([]CacheConfig, error) {
	ss, err := ParseSamples(r, CacheConfigMetric)
	if err != nil {
		return nil, err
	}
	if len(ss) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoMetric, CacheConfigMetric)
	}
	out := make([]CacheConfig, 0, len(ss))
	for _, s := range ss {
		bs, err1 := positive(s.Labels["block_size"])
		nb, err2 := positive(s.Labels["num_gpu_blocks"])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%w: block_size=%q num_gpu_blocks=%q", ErrNoCapacity,
				s.Labels["block_size"], s.Labels["num_gpu_blocks"])
		}
		out = append(out, CacheConfig{Engine: s.Labels["engine"], BlockSize: bs, NumGPUBlocks: nb})
	}
	return out, nil
}

func positive(s string) (int, error) {
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, err
	}
	if v <= 0 || v > math.MaxInt32 {
		return 0, errors.New("out of range")
	}
	return v, nil
}
