// Command rollout is an RL rollout driver: rollout steps of N concurrent
// agent programs, each a chain of model turns separated by tool calls,
// driven over HTTP through an agentkv gateway (a Router with program-aware
// admission control), the way slime-, ROLL- or SkyRL-style rollout workers
// point at their router unchanged. Admission keeps the programs placed on
// a worker within its KV cache, so their prefixes stay resident across
// tool gaps instead of evicting each other; programs that do not fit wait
// inside the gateway until the control loop resumes them.
//
//	go run ./examples/rollout                        # in-process mock workers (engine/mock)
//	go run ./examples/rollout --admission=false      # compare: everyone at once
//	go run ./examples/rollout --worker http://127.0.0.1:30001 --worker http://127.0.0.1:30002 --model MODEL
//
// Each turn sends the program's whole context as token ids to the
// gateway's /generate (SGLang's API, as slime and ROLL call it: input_ids,
// sampling_params, return_logprob; the generated ids are read from
// meta_info.output_token_logprobs), or with --api completions to
// /v1/completions with a token-id prompt (vLLM workers), with
// ThunderAgent's program_id and SGLang-gateway's X-SMG-Routing-Key; it appends the generated ids and a synthetic tool
// result for the next turn. A program ends with POST /programs/release.
// Between two rollout steps the driver does what a trainer does around a
// weight update, on every worker: pause generation, flush the prefix
// cache, load the new weights, continue (SGLang's endpoints, or vLLM's
// with --step-control vllm).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/agentkv/agentkv/admission"
	"github.com/agentkv/agentkv/engine/mock"
	"github.com/agentkv/agentkv/engine/sim"
	"github.com/agentkv/agentkv/gateway"
	"github.com/agentkv/agentkv/internal/wordtok"
)

// config describes a rollout.
type config struct {
	Programs, Turns, Steps int
	// Context shape, in tokens: a system prompt shared by every program,
	// a task prompt of its own, each turn's output and each tool result.
	System, Task, Output, Tool int
	ToolGap                    time.Duration // time a tool call takes (jittered ±50%)
	Tick                       time.Duration // control-loop period
	Admission                  bool
	Model                      string
	Seed                       uint64
	// StepControl names the engine endpoints used between steps:
	// "sglang" (/pause_generation, /flush_cache,
	// /update_weights_from_disk, /continue_generation), "vllm" (/pause,
	// /reset_prefix_cache, /resume) or "none".
	StepControl string
	// API is what a turn sends: "generate" (SGLang's /generate with
	// input_ids and return_logprob, as slime and ROLL do) or "completions"
	// (/v1/completions with a token-id prompt, for vLLM workers).
	API string
	// beforeRelease, when set, runs before a program's release (tests use
	// it as a gate: no program leaves before every program of the step
	// has reached admission, so the admission hold is deterministic).
	beforeRelease func(ctx context.Context, r *gateway.Stack, step int) error
}

// summary is what a rollout measured.
type summary struct {
	Turns, Held          int
	MaxWait, TotalWait   time.Duration
	PromptTokens, Cached int
	Wall                 time.Duration
	Admission            admission.Stats
}

func (s summary) String() string {
	return fmt.Sprintf("%d turns in %v; %d turns waited in the gateway (max %v, total %v); engine prefix hits %.1f%% of %d prompt tokens; admission: %d admitted, %d queued, %d paused, %d resumed",
		s.Turns, s.Wall.Round(time.Millisecond), s.Held, s.MaxWait.Round(time.Millisecond), s.TotalWait.Round(time.Millisecond),
		100*float64(s.Cached)/float64(max(s.PromptTokens, 1)), s.PromptTokens,
		s.Admission.Admitted, s.Admission.Queued, s.Admission.Paused, s.Admission.Resumed)
}

// programTokens is the largest context a program reaches.
func (c config) programTokens() int {
	return c.System + c.Task + c.Turns*c.Output + (c.Turns-1)*c.Tool
}

// rollout runs cfg's steps through an agentkv gateway (package gateway's
// Stack, served on a loopback port) in front of the workers at urls: the
// programs speak HTTP to the gateway only, as a rollout framework's
// workers would; the step boundary speaks to the engines, as a trainer
// does.
func rollout(ctx context.Context, cfg config, urls []string) (summary, error) {
	if len(urls) == 0 {
		return summary{}, errors.New("rollout: no workers")
	}
	var specs []gateway.WorkerSpec
	for _, u := range urls {
		specs = append(specs, gateway.WorkerSpec{URL: u})
	}
	st, err := gateway.NewStack(ctx, gateway.StackConfig{Workers: specs, Admission: cfg.Admission, Tick: cfg.Tick,
		Affinity: gateway.DefaultAffinity, Refresh: -1})
	if err != nil {
		return summary{}, err
	}
	defer st.Close()
	for i := range st.Workers() {
		info := st.WorkerInfo(i)
		// A program larger than a worker's resume ceiling would wait for
		// the 30-minute forced resume: refuse the configuration instead.
		if cfg.Admission && cfg.programTokens()+admission.DefaultBuffer > int(0.85*float64(info.KVCapacityTokens)) {
			return summary{}, fmt.Errorf("rollout: a program reaches %d tokens, more than worker %d's KV cache (%d tokens) admits",
				cfg.programTokens(), info.ID, info.KVCapacityTokens)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return summary{}, err
	}
	srv := &http.Server{Handler: st.Handler("")}
	go srv.Serve(ln)
	defer srv.Close()

	hc := gateway.NewHTTPClient()
	d := &driver{cfg: cfg, base: "http://" + ln.Addr().String(), hc: hc, tok: wordtok.New(wordtok.Config{})}
	start := time.Now()
	for step := range max(cfg.Steps, 1) {
		if step > 0 {
			if err := stepBoundary(ctx, hc, cfg.StepControl, urls, step); err != nil {
				return d.sum, err
			}
		}
		var wg sync.WaitGroup
		errs := make([]error, cfg.Programs)
		for p := range cfg.Programs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[p] = d.program(ctx, st, step, p)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return d.sum, err
		}
	}
	d.sum.Wall = time.Since(start)
	d.sum.Admission = st.Router().AdmissionStats()
	return d.sum, nil
}

// stepBoundary is what a trainer does around a weight update, on every
// engine: pause generation, flush the prefix cache, load the new weights
// (which SGLang follows with a flush of its own), continue.
func stepBoundary(ctx context.Context, hc *http.Client, control string, urls []string, step int) error {
	var calls []struct{ path, body string }
	switch control {
	case "", "sglang":
		calls = []struct{ path, body string }{{"/pause_generation", `{"mode":"abort"}`}, {"/flush_cache", ""},
			{"/update_weights_from_disk", fmt.Sprintf(`{"model_path":"checkpoint-%d","weight_version":"step-%d"}`, step, step)},
			{"/continue_generation", ""}}
	case "vllm":
		calls = []struct{ path, body string }{{"/pause?mode=abort", ""}, {"/reset_prefix_cache", ""}, {"/resume", ""}}
	case "none":
		return nil
	default:
		return fmt.Errorf("rollout: unknown step control %q", control)
	}
	for _, u := range urls {
		for _, c := range calls {
			if err := postJSON(ctx, hc, u+c.path, []byte(c.body), nil); err != nil {
				return fmt.Errorf("rollout: step %d boundary: %w", step, err)
			}
		}
	}
	return nil
}

type driver struct {
	cfg  config
	base string // the gateway's URL
	hc   *http.Client
	tok  *wordtok.Tokenizer // the mock workers' tokenizer, for replies without token_ids

	mu  sync.Mutex // guards sum
	sum summary
}

// program runs one agent program: turns with tool gaps, each a request to
// the gateway with the program's whole context as token ids; admission
// holds a request inside the gateway while the program is paused or
// queued. After the last turn the program is released (ThunderAgent's
// POST /programs/release), which frees its place for waiting programs.
func (d *driver) program(ctx context.Context, st *gateway.Stack, step, p int) error {
	rng := rand.New(rand.NewPCG(d.cfg.Seed+uint64(step)<<32, uint64(p)))
	id := "s" + strconv.Itoa(step) + "-program-" + strconv.Itoa(p)
	tokens := make([]uint32, 0, d.cfg.programTokens())
	for i := range d.cfg.System {
		tokens = append(tokens, uint32(i%30000)) // shared by every program
	}
	tokens = appendRandom(tokens, rng, d.cfg.Task)
	for turn := range d.cfg.Turns {
		out, u, waited, err := d.complete(ctx, id, tokens)
		if err != nil {
			return fmt.Errorf("%s turn %d: %w", id, turn, err)
		}
		d.record(waited, u)
		tokens = append(tokens, out...)
		if turn == d.cfg.Turns-1 {
			break
		}
		if err := sleep(ctx, d.cfg.ToolGap/2+time.Duration(rng.Int64N(int64(d.cfg.ToolGap)+1))); err != nil {
			return err
		}
		tokens = appendRandom(tokens, rng, d.cfg.Tool) // the tool's result
	}
	if d.cfg.beforeRelease != nil {
		if err := d.cfg.beforeRelease(ctx, st, step); err != nil {
			return err
		}
	}
	return d.release(ctx, id)
}

func (d *driver) record(waited time.Duration, u completion) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sum.Turns++
	if waited > 0 {
		d.sum.Held++
		d.sum.TotalWait += waited
		d.sum.MaxWait = max(d.sum.MaxWait, waited)
	}
	d.sum.PromptTokens += u.Usage.PromptTokens
	d.sum.Cached += u.Usage.Details.CachedTokens
}

// completion is the part of vLLM's completion response the driver reads.
type completion struct {
	Choices []struct {
		Text         string   `json:"text"`
		TokenIDs     []uint32 `json:"token_ids"`
		FinishReason string   `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		Details          struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// complete sends one turn; waited is how long admission held it (the
// gateway's X-Agentkv-Waited-Ms). The reply's token_ids (vLLM ≥ 0.10.2
// with return_token_ids) are the new context; a reply without them (the
// mock worker) is tokenized by the mock's word tokenizer, which gives the
// ids it generated.
func (d *driver) complete(ctx context.Context, program string, prompt []uint32) ([]uint32, completion, time.Duration, error) {
	var c completion
	path := gateway.CompletionsPath
	body, _ := json.Marshal(map[string]any{"model": d.cfg.Model, "prompt": prompt, "max_tokens": d.cfg.Output,
		"ignore_eos": true, "return_token_ids": true, "program_id": program})
	if d.cfg.API != "completions" {
		path = gateway.GeneratePath
		body, _ = json.Marshal(map[string]any{"input_ids": prompt, "return_logprob": true, "program_id": program,
			"sampling_params": map[string]any{"max_new_tokens": d.cfg.Output, "ignore_eos": true, "temperature": 1.0}})
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, c, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-SMG-Routing-Key", program)
	resp, err := d.hc.Do(req)
	if err != nil {
		return nil, c, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, c, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, c, 0, fmt.Errorf("gateway returned %d: %.200s", resp.StatusCode, b)
	}
	ms, _ := strconv.ParseFloat(resp.Header.Get(gateway.HeaderWaited), 64)
	waited := time.Duration(ms * float64(time.Millisecond))
	if path == gateway.GeneratePath {
		// SGLang's answer: the generated ids and their logprobs as
		// meta_info.output_token_logprobs [logprob, id, text] (slime reads
		// them from there).
		var g struct {
			Meta struct {
				Prompt   int      `json:"prompt_tokens"`
				Cached   int      `json:"cached_tokens"`
				Logprobs [][3]any `json:"output_token_logprobs"`
			} `json:"meta_info"`
		}
		if err := json.Unmarshal(b, &g); err != nil {
			return nil, c, 0, fmt.Errorf("unreadable /generate answer: %.200s", b)
		}
		out := make([]uint32, 0, len(g.Meta.Logprobs))
		for _, e := range g.Meta.Logprobs {
			id, ok := e[1].(float64)
			if !ok {
				return nil, c, 0, fmt.Errorf("bad output_token_logprobs entry %v", e)
			}
			out = append(out, uint32(id))
		}
		c.Usage.PromptTokens, c.Usage.Details.CachedTokens, c.Usage.CompletionTokens = g.Meta.Prompt, g.Meta.Cached, len(out)
		return out, c, waited, nil
	}
	if err := json.Unmarshal(b, &c); err != nil || len(c.Choices) == 0 {
		return nil, c, 0, fmt.Errorf("unreadable completion: %.200s", b)
	}
	out := c.Choices[0].TokenIDs
	if out == nil {
		out = d.tok.Encode(nil, c.Choices[0].Text)
	}
	return out, c, waited, nil
}

// release ends the program (ThunderAgent's end-of-program call).
func (d *driver) release(ctx context.Context, program string) error {
	body, _ := json.Marshal(map[string]string{"program_id": program})
	return postJSON(ctx, d.hc, d.base+gateway.ReleasePath, body, nil)
}

// postJSON posts body and fails on a status other than 200.
func postJSON(ctx context.Context, hc *http.Client, url string, body []byte, hdr http.Header) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s returned %d: %.200s", url, resp.StatusCode, b)
	}
	return nil
}

func appendRandom(dst []uint32, rng *rand.Rand, n int) []uint32 {
	for range n {
		dst = append(dst, uint32(rng.IntN(50000)))
	}
	return dst
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startWorkers starts n mock workers (engine/mock: a simulated engine with
// continuous batching, a prefix cache of blocks×16 tokens and a step-time
// model, run speedup times faster than real time).
func startWorkers(n, blocks int, speedup float64) ([]*mock.Server, []string, func(), error) {
	var srvs []*mock.Server
	var urls []string
	stop := func() {
		for _, s := range srvs {
			s.Close()
		}
	}
	for range n {
		s, err := mock.Start(mock.Config{Speedup: speedup, Model: "mock", Aliases: []string{"*"},
			Engine: sim.Config{BlockSize: 16, DeviceBlocks: blocks}})
		if err != nil {
			stop()
			return nil, nil, nil, err
		}
		srvs = append(srvs, s)
		urls = append(urls, s.URL())
	}
	return srvs, urls, stop, nil
}

type urlList []string

func (u *urlList) String() string     { return fmt.Sprint(*u) }
func (u *urlList) Set(s string) error { *u = append(*u, s); return nil }

func main() {
	cfg := config{Model: "mock"}
	var urls urlList
	flag.Var(&urls, "worker", "engine base URL (repeatable; default: in-process mock workers)")
	flag.IntVar(&cfg.Programs, "programs", 64, "concurrent agent programs per rollout step")
	flag.IntVar(&cfg.Turns, "turns", 4, "model turns per program")
	flag.IntVar(&cfg.Steps, "steps", 2, "rollout steps (a pause, flush, weight update and continue between two)")
	flag.IntVar(&cfg.System, "system", 1024, "shared system prompt tokens")
	flag.IntVar(&cfg.Task, "task", 3072, "per-program task prompt tokens")
	flag.IntVar(&cfg.Output, "output", 32, "tokens generated per turn")
	flag.IntVar(&cfg.Tool, "tool", 512, "tokens of each tool result")
	flag.DurationVar(&cfg.ToolGap, "tool-gap", 25*time.Millisecond, "mean tool call time")
	flag.DurationVar(&cfg.Tick, "tick", 20*time.Millisecond, "control-loop period (ThunderAgent uses 5s)")
	flag.BoolVar(&cfg.Admission, "admission", true, "program-aware admission control")
	flag.StringVar(&cfg.Model, "model", cfg.Model, "model name sent to the workers")
	flag.StringVar(&cfg.API, "api", "generate", "what a turn sends: generate (SGLang's /generate) or completions (/v1/completions, for vLLM workers)")
	flag.StringVar(&cfg.StepControl, "step-control", "sglang", "engine endpoints between steps: sglang, vllm or none")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "seed of the synthetic tokens")
	n := flag.Int("mock-workers", 2, "in-process mock workers when no --worker is given")
	blocks := flag.Int("mock-blocks", 3000, "KV blocks (of 16 tokens) per mock worker")
	speedup := flag.Float64("mock-speedup", 2, "mock workers run this many times faster than the modelled GPU")
	flag.Parse()
	if cfg.Programs < 1 || cfg.Turns < 1 || cfg.Output < 1 || cfg.Tick <= 0 {
		log.Fatal("rollout: --programs, --turns, --output and --tick must be positive")
	}
	if len(urls) == 0 {
		_, u, stop, err := startWorkers(*n, *blocks, *speedup)
		if err != nil {
			log.Fatal(err)
		}
		defer stop()
		urls = u
	}
	s, err := rollout(context.Background(), cfg, urls)
	if err != nil {
		log.Print(err)
		os.Exit(1)
	}
	fmt.Println(s)
}
