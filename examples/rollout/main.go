// Command rollout is an RL rollout driver: N concurrent agent programs,
// each a chain of model turns separated by tool calls, driven through an
// agentkv.Router with program-aware admission control. Admission keeps the
// programs placed on a worker within its KV cache, so their prefixes stay
// resident across tool gaps instead of evicting each other; programs that
// do not fit wait in Router.Route until the control loop (Router.Tick on a
// ticker) resumes them.
//
//	go run ./examples/rollout                        # in-process fake engines
//	go run ./examples/rollout --admission=false      # compare: everyone at once
//	go run ./examples/rollout --worker http://127.0.0.1:8001 --worker http://127.0.0.1:8002 --model MODEL
//
// Each turn sends the program's whole context as token ids to
// /v1/completions with return_token_ids (vLLM ≥ 0.10.2), the way RL
// frameworks keep tokens exact, and appends the generated ids and a
// synthetic tool result for the next turn.
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

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/admission"
	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/session"
)

// config describes a rollout.
type config struct {
	Programs, Turns int
	// Context shape, in tokens: a system prompt shared by every program,
	// a task prompt of its own, each turn's output and each tool result.
	System, Task, Output, Tool int
	ToolGap                    time.Duration // time a tool call takes (jittered ±50%)
	Tick                       time.Duration // control-loop period
	Admission                  bool
	Model                      string
	Seed                       uint64
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
	return fmt.Sprintf("%d turns in %v; %d turns waited in Route (max %v, total %v); engine prefix hits %.1f%% of %d prompt tokens; admission: %d admitted, %d queued, %d paused, %d resumed",
		s.Turns, s.Wall.Round(time.Millisecond), s.Held, s.MaxWait.Round(time.Millisecond), s.TotalWait.Round(time.Millisecond),
		100*float64(s.Cached)/float64(max(s.PromptTokens, 1)), s.PromptTokens,
		s.Admission.Admitted, s.Admission.Queued, s.Admission.Paused, s.Admission.Resumed)
}

// programTokens is the largest context a program reaches.
func (c config) programTokens() int {
	return c.System + c.Task + c.Turns*c.Output + (c.Turns-1)*c.Tool
}

// rollout runs cfg's programs against the vLLM servers at urls.
func rollout(ctx context.Context, cfg config, urls []string) (summary, error) {
	var ws []*vllm.Worker
	for i, u := range urls {
		w, err := vllm.NewWorker(ctx, vllm.WorkerConfig{ID: uint64(i), URL: u})
		if err != nil {
			return summary{}, err
		}
		ws = append(ws, w)
	}
	if len(ws) == 0 {
		return summary{}, errors.New("rollout: no workers")
	}
	rc := agentkv.Config{BlockSize: ws[0].BlockSize(), Approximate: true, TickInterval: cfg.Tick}
	if cfg.Admission {
		rc.Admission = &admission.Config{Interval: cfg.Tick}
	}
	r, err := agentkv.New(rc)
	if err != nil {
		return summary{}, err
	}
	defer r.Close()
	for _, w := range ws {
		info := agentkv.WorkerInfo{ID: w.ID(), BlockSize: w.BlockSize(), KVCapacityTokens: w.KVCapacityTokens()}
		// A program larger than a worker's resume ceiling would wait for
		// the 30-minute forced resume: refuse the configuration instead.
		if cfg.Admission && cfg.programTokens()+admission.DefaultBuffer > int(0.85*float64(info.KVCapacityTokens)) {
			return summary{}, fmt.Errorf("rollout: a program reaches %d tokens, more than worker %d's KV cache (%d tokens) admits",
				cfg.programTokens(), info.ID, info.KVCapacityTokens)
		}
		if err := r.AddWorker(agentkv.WorkerFunc(func() agentkv.WorkerInfo { return info })); err != nil {
			return summary{}, err
		}
	}

	// The control loop: admission pauses and resumes programs on each tick.
	tickCtx, stopTicks := context.WithCancel(ctx)
	defer stopTicks()
	go func() { _ = r.Run(tickCtx) }()

	d := &driver{cfg: cfg, r: r, ws: ws, hc: &http.Client{}}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, cfg.Programs)
	for p := range cfg.Programs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[p] = d.program(ctx, p)
		}()
	}
	wg.Wait()
	d.sum.Wall = time.Since(start)
	d.sum.Admission = r.AdmissionStats()
	return d.sum, errors.Join(errs...)
}

type driver struct {
	cfg config
	r   *agentkv.Router
	ws  []*vllm.Worker
	hc  *http.Client

	mu  sync.Mutex // guards sum
	sum summary
}

// program runs one agent program: turns with tool gaps, ending its session
// with the last turn (Final), which frees its place for waiting programs.
func (d *driver) program(ctx context.Context, p int) error {
	rng := rand.New(rand.NewPCG(d.cfg.Seed, uint64(p)))
	id := "program-" + strconv.Itoa(p)
	tokens := make([]uint32, 0, d.cfg.programTokens())
	for i := range d.cfg.System {
		tokens = append(tokens, uint32(i%30000)) // shared by every program
	}
	tokens = appendRandom(tokens, rng, d.cfg.Task)
	for turn := range d.cfg.Turns {
		ac := session.AgentContext{SessionID: id, ProgramID: id, Final: turn == d.cfg.Turns-1}
		dec, err := d.r.Route(ctx, &agentkv.Request{Tokens: tokens, Agent: ac, ExpectedOutputTokens: d.cfg.Output})
		if err != nil { // blocks while admission holds the program
			return fmt.Errorf("%s turn %d: %w", id, turn, err)
		}
		out, u, err := d.complete(ctx, d.ws[dec.Worker.ID], tokens)
		dec.Done(agentkv.Usage{PromptTokens: u.Usage.PromptTokens, CompletionTokens: u.Usage.CompletionTokens,
			CachedTokens: u.Usage.Details.CachedTokens, FinishReason: u.finish(), Failed: err != nil})
		if err != nil {
			return fmt.Errorf("%s turn %d on worker %d: %w", id, turn, dec.Worker.ID, err)
		}
		d.record(dec.Waited, u)
		tokens = append(tokens, out...)
		if turn == d.cfg.Turns-1 {
			break
		}
		if err := sleep(ctx, d.cfg.ToolGap/2+time.Duration(rng.Int64N(int64(d.cfg.ToolGap)+1))); err != nil {
			return err
		}
		tokens = appendRandom(tokens, rng, d.cfg.Tool) // the tool's result
	}
	return nil
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

func (c completion) finish() string {
	if len(c.Choices) == 0 {
		return ""
	}
	return c.Choices[0].FinishReason
}

func (d *driver) complete(ctx context.Context, w *vllm.Worker, prompt []uint32) ([]uint32, completion, error) {
	var c completion
	body, _ := json.Marshal(map[string]any{"model": d.cfg.Model, "prompt": prompt, "max_tokens": d.cfg.Output,
		"ignore_eos": true, "return_token_ids": true})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.Client().URL(vllm.CompletionPath), bytes.NewReader(body))
	if err != nil {
		return nil, c, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.hc.Do(req)
	if err != nil {
		return nil, c, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, c, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, c, fmt.Errorf("engine returned %d: %.200s", resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, &c); err != nil || len(c.Choices) == 0 {
		return nil, c, fmt.Errorf("unreadable completion: %.200s", b)
	}
	return c.Choices[0].TokenIDs, c, nil
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

// startFakes serves n fake engines on loopback ports.
func startFakes(n, blockSize, blocks int, perToken time.Duration) ([]string, func(), error) {
	var urls []string
	var srvs []*http.Server
	stop := func() {
		for _, s := range srvs {
			s.Close()
		}
	}
	for range n {
		e, err := newFakeEngine(blockSize, blocks, perToken)
		if err != nil {
			stop()
			return nil, nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			stop()
			return nil, nil, err
		}
		s := &http.Server{Handler: e}
		go s.Serve(ln)
		srvs = append(srvs, s)
		urls = append(urls, "http://"+ln.Addr().String())
	}
	return urls, stop, nil
}

type urlList []string

func (u *urlList) String() string     { return fmt.Sprint(*u) }
func (u *urlList) Set(s string) error { *u = append(*u, s); return nil }

func main() {
	cfg := config{Model: "fake"}
	var urls urlList
	flag.Var(&urls, "worker", "vLLM base URL (repeatable; default: in-process fake engines)")
	flag.IntVar(&cfg.Programs, "programs", 48, "concurrent agent programs")
	flag.IntVar(&cfg.Turns, "turns", 6, "model turns per program")
	flag.IntVar(&cfg.System, "system", 1024, "shared system prompt tokens")
	flag.IntVar(&cfg.Task, "task", 1024, "per-program task prompt tokens")
	flag.IntVar(&cfg.Output, "output", 128, "tokens generated per turn")
	flag.IntVar(&cfg.Tool, "tool", 256, "tokens of each tool result")
	flag.DurationVar(&cfg.ToolGap, "tool-gap", 200*time.Millisecond, "mean tool call time")
	flag.DurationVar(&cfg.Tick, "tick", 100*time.Millisecond, "control-loop period (ThunderAgent uses 5s)")
	flag.BoolVar(&cfg.Admission, "admission", true, "program-aware admission control")
	flag.StringVar(&cfg.Model, "model", cfg.Model, "model name sent to the workers")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "seed of the synthetic tokens")
	fakes := flag.Int("fakes", 2, "in-process fake engines when no --worker is given")
	fakeBlocks := flag.Int("fake-blocks", 1500, "KV blocks (of 16 tokens) per fake engine")
	perToken := flag.Duration("fake-per-token", 20*time.Microsecond, "fake engine compute time per token")
	flag.Parse()
	if cfg.Programs < 1 || cfg.Turns < 1 || cfg.Output < 1 || cfg.Tick <= 0 {
		log.Fatal("rollout: --programs, --turns, --output and --tick must be positive")
	}
	if len(urls) == 0 {
		u, stop, err := startFakes(*fakes, 16, *fakeBlocks, *perToken)
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
