package mock

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentkv/agentkv/internal/tokenapi"
)

type sglReply struct {
	Text      string   `json:"text"`
	OutputIDs []uint32 `json:"output_ids"`
	MetaInfo  struct {
		ID           string `json:"id"`
		FinishReason *struct {
			Type    string `json:"type"`
			Matched *int64 `json:"matched"`
		} `json:"finish_reason"`
		PromptTokens        int             `json:"prompt_tokens"`
		CompletionTokens    int             `json:"completion_tokens"`
		CachedTokens        int             `json:"cached_tokens"`
		OutputTokenLogprobs [][3]any        `json:"output_token_logprobs"`
		InputTokenLogprobs  [][3]any        `json:"input_token_logprobs"`
		OutputTopLogprobs   [][][3]any      `json:"output_top_logprobs"`
		WeightVersion       string          `json:"weight_version"`
		Raw                 json.RawMessage `json:"-"`
	} `json:"meta_info"`
}

func seqIDs(n, base int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = base + i
	}
	return ids
}

func sglPost(t *testing.T, s *Server, body any) (int, sglReply, []byte) {
	t.Helper()
	code, b := post(t, s.URL()+"/generate", body)
	var r sglReply
	if code == http.StatusOK {
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("unreadable reply %s: %v", b, err)
		}
	}
	return code, r, b
}

// TestSGLangGenerate: /generate with input_ids answers SGLang's shape with
// exact, deterministic ids and logprobs; a second call with the first
// call's context reports the first call's full blocks as cached.
func TestSGLangGenerate(t *testing.T) {
	s := start(t, Config{Engine: simConfig(16, 1024, 0)})
	prompt := seqIDs(100, 1000)
	body := map[string]any{"rid": "a", "input_ids": prompt, "return_logprob": true, "logprob_start_len": 98, "top_logprobs_num": 2,
		"sampling_params": map[string]any{"max_new_tokens": 20, "temperature": 0.7, "ignore_eos": true}}
	code, r1, raw := sglPost(t, s, body)
	if code != 200 {
		t.Fatalf("%d %s", code, raw)
	}
	m := r1.MetaInfo
	if m.ID != "a" || m.FinishReason == nil || m.FinishReason.Type != "length" || m.PromptTokens != 100 || m.CompletionTokens != 20 ||
		len(r1.OutputIDs) != 20 || len(m.OutputTokenLogprobs) != 20 || len(m.InputTokenLogprobs) != 2 || len(m.OutputTopLogprobs) != 20 ||
		m.CachedTokens != 0 || r1.Text == "" || m.WeightVersion != "default" {
		t.Fatalf("reply %s", raw)
	}
	for i, e := range m.OutputTokenLogprobs {
		lp, _ := e[0].(float64)
		id, _ := e[1].(float64)
		if lp >= 0 || uint32(id) != r1.OutputIDs[i] || e[2] != nil {
			t.Fatalf("logprob entry %d: %v", i, e)
		}
	}
	if len(m.OutputTopLogprobs[0]) != 2 || m.OutputTopLogprobs[0][0][1].(float64) != float64(r1.OutputIDs[0]) {
		t.Fatalf("top logprobs %v", m.OutputTopLogprobs[0])
	}
	// Same request again (new rid): equal tokens and logprobs, and the
	// prompt's full blocks (96 of 100 tokens) cached.
	body["rid"] = "b"
	_, r2, raw2 := sglPost(t, s, body)
	if !slices.Equal(r1.OutputIDs, r2.OutputIDs) || fmt.Sprint(m.OutputTokenLogprobs) != fmt.Sprint(r2.MetaInfo.OutputTokenLogprobs) {
		t.Fatalf("not deterministic: %s vs %s", raw, raw2)
	}
	if r2.MetaInfo.CachedTokens != 96 {
		t.Fatalf("second call cached %d, want 96", r2.MetaInfo.CachedTokens)
	}
	// The next turn: context + reply + more; the first call's full blocks
	// of prompt and output (112 of 120 tokens) are cached.
	next := append(slices.Clone(prompt), func() []int {
		out := make([]int, len(r1.OutputIDs))
		for i, v := range r1.OutputIDs {
			out[i] = int(v)
		}
		return out
	}()...)
	next = append(next, seqIDs(30, 5000)...)
	_, r3, _ := sglPost(t, s, map[string]any{"input_ids": next, "sampling_params": map[string]any{"max_new_tokens": 4}})
	if r3.MetaInfo.CachedTokens != 112 || r3.MetaInfo.ID == "" || r3.MetaInfo.OutputTokenLogprobs != nil {
		t.Fatalf("next turn: cached %d, id %q", r3.MetaInfo.CachedTokens, r3.MetaInfo.ID)
	}
	// Text prompts are tokenized by words.
	_, r4, raw4 := sglPost(t, s, map[string]any{"text": "one two three", "sampling_params": map[string]any{"max_new_tokens": 3}})
	if r4.MetaInfo.PromptTokens != 3 || r4.MetaInfo.CompletionTokens > 3 {
		t.Fatalf("text prompt: %s", raw4)
	}
	// A stop token ends the reply, included.
	stop := r1.OutputIDs[5]
	_, r5, raw5 := sglPost(t, s, map[string]any{"input_ids": prompt, "sampling_params": map[string]any{"max_new_tokens": 20, "ignore_eos": true, "stop_token_ids": []uint32{stop}}})
	first := slices.Index(r1.OutputIDs, stop)
	if r5.MetaInfo.FinishReason.Type != "stop" || r5.MetaInfo.FinishReason.Matched == nil || *r5.MetaInfo.FinishReason.Matched != int64(stop) || len(r5.OutputIDs) != first+1 {
		t.Fatalf("stop token %d (first at %d): %s", stop, first, raw5)
	}
}

// readSSE reads data: lines until [DONE], decoding each into a fresh T.
func readSSE[T any](t *testing.T, resp *http.Response, each func(T)) {
	t.Helper()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		data := strings.TrimPrefix(line, "data: ")
		if data == "[DONE]" {
			return
		}
		var v T
		if err := json.Unmarshal([]byte(data), &v); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		each(v)
	}
	t.Fatalf("stream ended without [DONE]: %v", sc.Err())
}

func postStream(t *testing.T, url string, body any) *http.Response {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(url, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	return resp
}

// TestSGLangAbortStream: an abort by rid ends a stream with finish reason
// abort within one step, keeps the tokens so far, and frees the rid; an
// unknown rid and a rid in flight are 400s.
func TestSGLangAbortStream(t *testing.T) {
	s := start(t, Config{Speedup: 10, Engine: simConfig(16, 4096, 0), MaxModelLen: 1 << 16})
	body := map[string]any{"rid": "long", "input_ids": seqIDs(64, 7), "stream": true, "return_logprob": true,
		"sampling_params": map[string]any{"max_new_tokens": 50000, "ignore_eos": true}}
	resp := postStream(t, s.URL()+"/generate", body)
	chunks, aborted, atAbort := 0, false, -1
	var last sglReply
	readSSE(t, resp, func(r sglReply) {
		chunks++
		if chunks == 1 {
			s.rl.mu.Lock()
			j := s.rl.rids["long"].job
			s.rl.mu.Unlock()
			defer func() {
				gen, done, _, _ := s.drv.progress(j)
				if !done {
					t.Error("the request runs on after its abort returned")
				}
				atAbort = gen
			}()
			if code, b := post(t, s.URL()+"/generate", body); code != 400 || !strings.Contains(string(b), `"error":{"message":"Duplicate request ID`) {
				t.Errorf("rid in flight: %d %s", code, b)
			}
			if code, b := post(t, s.URL()+"/abort_request", map[string]any{"rid": "long"}); code != 200 {
				t.Errorf("abort: %d %s", code, b)
			}
		}
		if r.MetaInfo.FinishReason != nil {
			aborted = r.MetaInfo.FinishReason.Type == "abort"
		}
		last = r
	})
	if !aborted || last.MetaInfo.CompletionTokens >= 50000 || len(last.OutputIDs) != last.MetaInfo.CompletionTokens ||
		len(last.MetaInfo.OutputTokenLogprobs) != len(last.OutputIDs) {
		t.Fatalf("after the abort: %d chunks, aborted %v, %d tokens", chunks, aborted, last.MetaInfo.CompletionTokens)
	}
	if last.MetaInfo.CompletionTokens != atAbort {
		t.Fatalf("%d tokens streamed, %d generated when the abort returned", last.MetaInfo.CompletionTokens, atAbort)
	}
	if code, b := post(t, s.URL()+"/abort_request", map[string]any{"rid": "long"}); code != 400 || !strings.Contains(string(b), "unknown rid") {
		t.Fatalf("unknown rid: %d %s", code, b)
	}
	if sn := s.drv.snapshot(); sn.running+sn.waiting != 0 {
		t.Fatalf("the aborted request still runs: %+v", sn)
	}
	// The rid is free again.
	body["stream"], body["sampling_params"] = false, map[string]any{"max_new_tokens": 2}
	if code, _, raw := sglPost(t, s, body); code != 200 {
		t.Fatalf("rid reuse after the end: %d %s", code, raw)
	}
}

// TestPauseFlushContinue: pause (abort mode) ends requests in flight with
// finish reason abort and holds new ones; a flush empties the cache (the
// next turn reports 0 cached tokens) and publishes AllBlocksCleared;
// continue releases the held request; a flush with requests in flight is
// refused.
func TestPauseFlushContinue(t *testing.T) {
	s := start(t, Config{Speedup: 10, Events: "tcp://127.0.0.1:0", Replay: "tcp://127.0.0.1:0", Engine: simConfig(16, 4096, 0)})
	ts := newTierSets()
	subscribe(t, s, ts)
	prompt := seqIDs(64, 3)
	short := map[string]any{"input_ids": prompt, "sampling_params": map[string]any{"max_new_tokens": 4}}
	if code, _, raw := sglPost(t, s, short); code != 200 {
		t.Fatal(code, string(raw))
	}
	converge(t, s, ts)
	if len(ts.sorted(0)) == 0 {
		t.Fatal("no blocks cached")
	}
	long := map[string]any{"rid": "x", "input_ids": seqIDs(40, 900), "stream": true, "sampling_params": map[string]any{"max_new_tokens": 50000, "ignore_eos": true}}
	resp := postStream(t, s.URL()+"/generate", long)
	var fin string
	paused := false
	readSSE(t, resp, func(r sglReply) {
		if !paused {
			paused = true
			if code, b := post(t, s.URL()+"/flush_cache", ""); code != 400 {
				t.Errorf("flush while busy: %d %s", code, b)
			}
			if code, b := post(t, s.URL()+"/pause_generation", map[string]any{"mode": "abort"}); code != 200 || !strings.Contains(string(b), `"status":"ok"`) {
				t.Errorf("pause: %d %s", code, b)
			}
		}
		if r.MetaInfo.FinishReason != nil {
			fin = r.MetaInfo.FinishReason.Type
		}
	})
	if fin != "abort" {
		t.Fatalf("paused stream finished %q", fin)
	}
	if code, b := post(t, s.URL()+"/update_weights_from_disk", map[string]any{"model_path": "/ckpt/2", "weight_version": "v2"}); code != 200 || !strings.Contains(string(b), `"success":true`) {
		t.Fatalf("update weights: %d %s", code, b)
	}
	converge(t, s, ts)
	if ts.clears == 0 || len(ts.sorted(0)) != 0 {
		t.Fatalf("after the flush the events describe %d blocks, %d clears", len(ts.sorted(0)), ts.clears)
	}
	// A request while paused waits until continue.
	done := make(chan sglReply, 1)
	go func() {
		_, r, _ := sglPost(t, s, short)
		done <- r
	}()
	for s.drv.snapshot().waiting == 0 {
		<-waitTick()
	}
	select {
	case <-done:
		t.Fatal("a request ran while paused")
	default:
	}
	if code, _ := post(t, s.URL()+"/continue_generation", ""); code != 200 {
		t.Fatal("continue", code)
	}
	r := <-done
	if r.MetaInfo.CachedTokens != 0 || r.MetaInfo.WeightVersion != "v2" || r.MetaInfo.FinishReason == nil {
		t.Fatalf("after the flush: cached %d, version %q", r.MetaInfo.CachedTokens, r.MetaInfo.WeightVersion)
	}
}

// TestVLLMGenerate: /inference/v1/generate answers vLLM's shape, streaming
// and not, with logprobs, usage and cached tokens; /pause, /reset_prefix_cache,
// /resume and /sleep, /wake_up work as vLLM's.
func TestVLLMGenerate(t *testing.T) {
	s := start(t, Config{Engine: simConfig(16, 1024, 0)})
	body := map[string]any{"model": s.Model(), "token_ids": seqIDs(50, 10), "cache_salt": "tenant-a",
		"sampling_params": map[string]any{"max_tokens": 8, "logprobs": 0, "ignore_eos": true}}
	type reply struct {
		RequestID string `json:"request_id"`
		Choices   []struct {
			TokenIDs     []uint32 `json:"token_ids"`
			FinishReason *string  `json:"finish_reason"`
			Logprobs     *struct {
				Content []struct {
					Token       string  `json:"token"`
					Logprob     float64 `json:"logprob"`
					TopLogprobs []any   `json:"top_logprobs"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
		Usage *struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
			Details          struct {
				Cached int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	code, b := post(t, s.URL()+"/inference/v1/generate", body)
	var r reply
	if code != 200 || json.Unmarshal(b, &r) != nil || len(r.Choices) != 1 {
		t.Fatalf("%d %s", code, b)
	}
	c := r.Choices[0]
	if len(c.TokenIDs) != 8 || *c.FinishReason != "length" || c.Logprobs == nil || len(c.Logprobs.Content) != 8 ||
		c.Logprobs.Content[0].Token != tokenapi.TokenString(c.TokenIDs[0]) || c.Logprobs.Content[0].Logprob >= 0 || r.Usage.PromptTokens != 50 {
		t.Fatalf("reply %s", b)
	}
	// Streamed: deltas that add up to the same tokens; usage at the end;
	// the prompt's 48 full-block tokens cached.
	body["stream"], body["stream_options"] = true, map[string]any{"include_usage": true}
	resp := postStream(t, s.URL()+"/inference/v1/generate", body)
	var ids []uint32
	var fin string
	cached := -1
	readSSE(t, resp, func(r reply) {
		ids = append(ids, r.Choices[0].TokenIDs...)
		if f := r.Choices[0].FinishReason; f != nil {
			fin = *f
			cached = r.Usage.Details.Cached
		}
	})
	if !slices.Equal(ids, c.TokenIDs) || fin != "length" || cached != 48 {
		t.Fatalf("stream: %v %q cached %d", ids, fin, cached)
	}
	for _, step := range []struct{ path, want string }{
		{"/pause?mode=abort", `"status":"paused"`}, {"/reset_prefix_cache", ""}, {"/resume", `"resumed"`},
		{"/sleep?level=1", ""}, {"/wake_up", ""},
	} {
		if code, b := post(t, s.URL()+step.path, ""); code != 200 || !strings.Contains(string(b), step.want) {
			t.Fatalf("%s: %d %s", step.path, code, b)
		}
	}
	delete(body, "stream")
	code, b = post(t, s.URL()+"/inference/v1/generate", body)
	if json.Unmarshal(b, &r) != nil || r.Usage.Details.Cached != 0 {
		t.Fatalf("after the reset: %d %s", code, b)
	}
}

// TestTokenAPIBadInput: bad input is a 400 in each API's shape.
func TestTokenAPIBadInput(t *testing.T) {
	s := start(t, Config{Engine: simConfig(16, 1024, 0), MaxModelLen: 4096})
	var huge bytes.Buffer
	huge.WriteString(`{"input_ids":[`)
	for i := range 10_000_000 {
		if i > 0 {
			huge.WriteByte(',')
		}
		huge.WriteByte('1')
	}
	huge.WriteString(`]}`)
	for _, tc := range []struct{ body, want string }{
		{`{"input_ids":[1,-2]}`, "negative"},
		{`{"input_ids":[1,2.5]}`, "not an integer"},
		{`{"input_ids":["a"]}`, "not an integer"},
		{`{"input_ids":[4294967296]}`, "beyond the vocabulary"},
		{`{"input_ids":[2147483648]}`, "beyond the vocabulary"},
		{`{"input_ids":[[1],[2]]}`, "batch"},
		{`{"rid":["a","b"],"input_ids":[1]}`, "one string"},
		{`{}`, "Either text or input_ids"},
		{`{"text":"a","input_ids":[1]}`, "not both"},
		{`{"input_ids":[1],"sampling_params":{"max_new_tokens":-1}}`, "negative"},
		{`{"input_ids":[1],"sampling_params":{"max_new_tokens":"x"}}`, "sampling_params"},
		{`{"input_ids":[1],"logprob_start_len":5}`, "logprob_start_len"},
		{`{"input_ids":` + strings.Repeat("[", 1) + `1`, "malformed"},
		{huge.String(), "more than 2097152 token ids"},
		{`{"input_ids":[` + strings.TrimSuffix(strings.Repeat("1,", 5000), ",") + `]}`, "context length"},
	} {
		code, b := post(t, s.URL()+"/generate", tc.body)
		var e tokenapi.SGLangError
		if code != 400 || json.Unmarshal(b, &e) != nil || !strings.Contains(e.Error.Message, tc.want) {
			t.Errorf("%.60s: %d %s", tc.body, code, b)
		}
	}
	for _, tc := range []struct{ body, want string }{
		{`{"token_ids":[1,-1],"sampling_params":{}}`, "negative"},
		{`{"token_ids":[],"sampling_params":{}}`, "at least one"},
		{`{"token_ids":[1]}`, "sampling_params"},
		{`{"token_ids":[1],"sampling_params":{"logprobs":-1}}`, "logprobs"},
		{`{"token_ids":[9999999999],"sampling_params":{}}`, "vocabulary"},
	} {
		code, b := post(t, s.URL()+"/inference/v1/generate", tc.body)
		var e struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
			} `json:"error"`
		}
		if code != 400 || json.Unmarshal(b, &e) != nil || !strings.Contains(e.Error.Message, tc.want) || e.Error.Type == "" {
			t.Errorf("vllm %.60s: %d %s", tc.body, code, b)
		}
	}
	if code, b := post(t, s.URL()+"/abort_request", `{"rid":"nobody"}`); code != 400 || !strings.Contains(string(b), `{"error":{"message":"abort_request: unknown rid`) {
		t.Errorf("abort unknown: %d %s", code, b)
	}
	if code, b := post(t, s.URL()+"/abort_request", `{}`); code != 400 {
		t.Errorf("abort nothing: %d %s", code, b)
	}
	if code, _ := post(t, s.URL()+"/abort_request", `{"abort_all":true}`); code != 200 {
		t.Errorf("abort_all: %d", code)
	}
}

// waitTick paces a loop that polls for a state the test waits on.
func waitTick() <-chan time.Time { return time.After(2 * time.Millisecond) }
