package hftok

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// benchTokenizer is the tokenizer of AGENTKV_HF_TOKENIZER (e.g. Qwen3's
// tokenizer.json, as .ci/tokenizer-ref.sh installs it) or the small test
// one.
func benchTokenizer(b *testing.B, cfg Config) *Tokenizer {
	b.Helper()
	if path := os.Getenv("AGENTKV_HF_TOKENIZER"); path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		tok, err := ParseConfig(data, cfg)
		if err != nil {
			b.Fatal(err)
		}
		return tok
	}
	tok, err := ParseConfig(mustRead(b, "tiny.json"), cfg)
	if err != nil {
		b.Fatal(err)
	}
	return tok
}

// agentPrompt renders a coding agent's conversation in ChatML of about
// size characters: a system prompt with tool schemas, then turns of user
// requests, assistant thinking and tool calls, and tool results holding
// source files with line numbers, listings and JSON.
func agentPrompt(size int) string {
	r := &rng{s: 42}
	var b strings.Builder
	b.WriteString("<|im_start|>system\nYou are a coding agent working in a Go repository. ")
	for i := 0; i < 20; i++ {
		b.WriteString(genProse(r) + " ")
	}
	b.WriteString("\n\n# Tools\n\n<tools>\n")
	for i := 0; i < 8; i++ {
		b.WriteString(genJSON(r) + "\n")
	}
	b.WriteString("</tools><|im_end|>\n")
	for turn := 0; b.Len() < size; turn++ {
		b.WriteString(agentTurn(r, turn))
	}
	return b.String()
}

func agentTurn(r *rng, turn int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<|im_start|>user\n%s (step %d)<|im_end|>\n", genProse(r), turn)
	b.WriteString("<|im_start|>assistant\n<think>\n" + genProse(r) + "\n</think>\n\n")
	fmt.Fprintf(&b, "<tool_call>\n{\"name\": \"Read\", \"arguments\": {\"file_path\": \"/repo/pkg/file%d.go\"}}\n</tool_call><|im_end|>\n", turn)
	b.WriteString("<|im_start|>user\n<tool_response>\n")
	line := 1
	for k := 0; k < 6; k++ {
		for _, l := range strings.SplitAfter(genCode(r), "\n") {
			if l != "" {
				fmt.Fprintf(&b, "%6d\t%s", line, l)
				line++
			}
		}
	}
	if turn%3 == 0 {
		b.WriteString(genJSON(r))
	}
	b.WriteString("\n</tool_response><|im_end|>\n")
	return b.String()
}

func reportTokens(b *testing.B, tokens int, elapsed time.Duration) {
	if elapsed <= 0 || tokens == 0 {
		return
	}
	total := float64(tokens) * float64(b.N)
	b.ReportMetric(total/elapsed.Seconds(), "tokens/s")
	b.ReportMetric(float64(elapsed.Nanoseconds())/total, "ns/token")
}

// BenchmarkEncode encodes a 100 K-character coding-agent prompt: cold
// (caches emptied before each encode), warm (the same prompt again: every
// segment from the segment cache), turn (the prompt with one new message
// appended, the per-turn case), and words (no segment cache, word cache
// warm: new text in a familiar vocabulary).
func BenchmarkEncode(b *testing.B) {
	const size = 100_000
	prompt := agentPrompt(size)
	name := fmt.Sprintf("n=%d", len(prompt))
	b.Run("cold/"+name, func(b *testing.B) {
		tok := benchTokenizer(b, Config{})
		tokens := len(tok.Encode(nil, prompt))
		b.SetBytes(int64(len(prompt)))
		b.ReportAllocs()
		var elapsed time.Duration
		dst := make([]uint32, 0, tokens)
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			tok.clearCaches()
			b.StartTimer()
			t0 := time.Now()
			dst = tok.Encode(dst[:0], prompt)
			elapsed += time.Since(t0)
		}
		reportTokens(b, tokens, elapsed)
	})
	b.Run("warm/"+name, func(b *testing.B) { benchRepeat(b, Config{}, prompt) })
	b.Run("turn/"+name, func(b *testing.B) {
		tok := benchTokenizer(b, Config{})
		tokens := len(tok.Encode(nil, prompt))
		r := &rng{s: 7}
		b.SetBytes(int64(len(prompt)))
		b.ReportAllocs()
		var elapsed time.Duration
		dst := make([]uint32, 0, tokens+4096)
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			text := prompt + agentTurn(r, 1000+i) + "<|im_start|>assistant\n"
			b.StartTimer()
			t0 := time.Now()
			dst = tok.Encode(dst[:0], text)
			elapsed += time.Since(t0)
		}
		reportTokens(b, tokens, elapsed)
	})
	b.Run("words/"+name, func(b *testing.B) { benchRepeat(b, Config{SegmentCacheTokens: -1}, prompt) })
}

// benchRepeat encodes the same prompt b.N times with a tokenizer of cfg.
func benchRepeat(b *testing.B, cfg Config, prompt string) {
	tok := benchTokenizer(b, cfg)
	tokens := len(tok.Encode(nil, prompt))
	b.SetBytes(int64(len(prompt)))
	b.ReportAllocs()
	dst := make([]uint32, 0, tokens)
	b.ResetTimer()
	t0 := time.Now()
	for i := 0; i < b.N; i++ {
		dst = tok.Encode(dst[:0], prompt)
	}
	reportTokens(b, tokens, time.Since(t0))
}

// BenchmarkEncodeParallel is the warm-words case from all CPUs at once
// (lock contention on the word cache).
func BenchmarkEncodeParallel(b *testing.B) {
	prompt := agentPrompt(100_000)
	tok := benchTokenizer(b, Config{SegmentCacheTokens: -1})
	tok.Encode(nil, prompt)
	b.SetBytes(int64(len(prompt)))
	b.RunParallel(func(pb *testing.PB) {
		var dst []uint32
		for pb.Next() {
			dst = tok.Encode(dst[:0], prompt)
		}
	})
}

// BenchmarkParse loads the tokenizer (Qwen3's 11 MB file when given).
func BenchmarkParse(b *testing.B) {
	path := os.Getenv("AGENTKV_HF_TOKENIZER")
	if path == "" {
		path = "testdata/tiny.json"
	}
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for i := 0; i < b.N; i++ {
		if _, err := Parse(data); err != nil {
			b.Fatal(err)
		}
	}
}
