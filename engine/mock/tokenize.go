package mock

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/agentkv/agentkv/internal/apiwire"
	"github.com/agentkv/agentkv/internal/wordtok"
)

// tokenizeRequest is vLLM's /tokenize body: a completion prompt, or chat
// messages with the template switches.
type tokenizeRequest struct {
	Model                string                `json:"model"`
	Prompt               *string               `json:"prompt"`
	Messages             []apiwire.ChatMessage `json:"messages"`
	Tools                []apiwire.ChatTool    `json:"tools"`
	AddGenerationPrompt  *bool                 `json:"add_generation_prompt"`
	ContinueFinalMessage bool                  `json:"continue_final_message"`
	ReturnTokenStrs      bool                  `json:"return_token_strs"`
}

// tokenizeResponse is vLLM's /tokenize reply.
type tokenizeResponse struct {
	Count       int       `json:"count"`
	MaxModelLen int       `json:"max_model_len"`
	Tokens      []uint32  `json:"tokens"`
	TokenStrs   *[]string `json:"token_strs"`
}

func (s *Server) tokenize(w http.ResponseWriter, r *http.Request) {
	var req tokenizeRequest
	if !s.decode(w, r, false, &req) {
		return
	}
	if !s.checkModel(req.Model) {
		s.unknownModel(w, false, req.Model)
		return
	}
	var ids []uint32
	switch {
	case req.Messages != nil:
		chat := apiwire.ChatRequest{Messages: req.Messages, Tools: req.Tools, AddGenerationPrompt: req.AddGenerationPrompt,
			ContinueFinalMessage: req.ContinueFinalMessage}
		if chat.ContinueFinalMessage && chat.GenerationPrompt() {
			s.fail(w, false, http.StatusBadRequest, "continue_final_message and add_generation_prompt cannot both be true")
			return
		}
		msgs, tools := wordtok.FromChat(&chat)
		ids = s.tok.ApplyChat(nil, msgs, tools, wordtok.ChatOptionsOf(&chat))
	case req.Prompt != nil:
		ids = s.tok.Encode(nil, *req.Prompt)
	default:
		s.fail(w, false, http.StatusBadRequest, "tokenize: give prompt or messages")
		return
	}
	out := tokenizeResponse{Count: len(ids), MaxModelLen: s.cfg.MaxModelLen, Tokens: ids}
	if req.ReturnTokenStrs {
		strs := make([]string, len(ids))
		for i := range ids {
			strs[i] = s.tok.Decode(ids[i : i+1])
		}
		out.TokenStrs = &strs
	}
	apiwire.WriteJSON(w, http.StatusOK, out)
}

func (s *Server) detokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model  string  `json:"model"`
		Tokens []int64 `json:"tokens"`
	}
	if !s.decode(w, r, false, &req) {
		return
	}
	if !s.checkModel(req.Model) {
		s.unknownModel(w, false, req.Model)
		return
	}
	ids := make([]uint32, len(req.Tokens))
	for i, t := range req.Tokens {
		if t < 0 || t >= 1<<31 {
			s.fail(w, false, http.StatusBadRequest, fmt.Sprintf("token id %d out of range", t))
			return
		}
		ids[i] = uint32(t)
	}
	apiwire.WriteJSON(w, http.StatusOK, map[string]string{"prompt": s.tok.Decode(ids)})
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	sn := s.drv.snapshot()
	var b strings.Builder
	lbl := fmt.Sprintf(`engine="0",model_name=%q`, s.cfg.Model)
	gauge := func(name, help string, v float64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s gauge\n%s{%s} %g\n", name, help, name, name, lbl, v)
	}
	counter := func(name, help string, v float64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s counter\n%s{%s} %g\n", name, help, name, name, lbl, v)
	}
	fmt.Fprintf(&b, "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n# TYPE vllm:cache_config_info gauge\n")
	fmt.Fprintf(&b, "vllm:cache_config_info{block_size=\"%d\",cache_dtype=\"auto\",enable_prefix_caching=\"True\",engine=\"0\",gpu_memory_utilization=\"0.9\",num_cpu_blocks=\"%d\",num_gpu_blocks=\"%d\"} 1.0\n",
		sn.cfg.BlockSize, sn.cfg.HostBlocks, sn.cfg.DeviceBlocks)
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.", float64(sn.running))
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", float64(sn.waiting))
	usage := float64(sn.usedBlocks) / float64(sn.cfg.DeviceBlocks)
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", usage)
	gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", usage)
	counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", float64(sn.stats.promptTokens))
	counter("vllm:generation_tokens_total", "Number of generation tokens processed.", float64(sn.stats.generationTokens))
	counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", float64(sn.simStats.PromptTokens))
	counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", float64(sn.simStats.HitTokens+sn.simStats.HostHits))
	counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", float64(sn.simStats.Preemptions))
	fmt.Fprintf(&b, "# HELP vllm:request_success_total Count of successfully processed requests.\n# TYPE vllm:request_success_total counter\nvllm:request_success_total{%s,finished_reason=\"stop\"} %d\n", lbl, sn.stats.finished)
	s.writeHintMetrics(&b, lbl)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write([]byte(b.String()))
}

// TokenizeChat returns the prompt tokens of a chat completions request
// body exactly as this server's /tokenize (and its generation) computes
// them, without a round trip: a gateway in the same process tokenizes for
// routing with it (it satisfies gateway.Tokenizer).
func (s *Server) TokenizeChat(body []byte) ([]uint32, error) {
	var req apiwire.ChatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("mock: chat request: %w", err)
	}
	msgs, tools := wordtok.FromChat(&req)
	return s.tok.ApplyChat(nil, msgs, tools, wordtok.ChatOptionsOf(&req)), nil
}
