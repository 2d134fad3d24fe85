// Command rollout is an RL rollout driver: N concurrent agent programs,
// each a chain of model turns separated by tool calls, driven over HTTP
// through an agentkv gateway (a Router with program-aware admission
// control), as slime-, SkyRL- or VERL-style rollout workers would point at
// it unchanged. Admission keeps the
// programs placed on a worker within its KV cache, so their prefixes stay
// resident across tool gaps instead of evicting each other; programs that
// do not fit wait inside the gateway until the control loop resumes them.
//
//	go run ./examples/rollout                        # in-process fake engines
//	go run ./examples/rollout --admission=false      # compare: everyone at once
//	go run ./examples/rollout --worker http://127.0.0.1:8001 --worker http://127.0.0.1:8002 --model MODEL
//
// Each turn sends the program's whole context as token ids to the
// gateway's /v1/completions with return_token_ids (vLLM ≥ 0.10.2), the way
// RL frameworks keep tokens exact, and ThunderAgent's program_id; it
// appends the generated ids and a synthetic tool result for the next turn.
// The program ends with POST /programs/release.
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
	"github.com/agentkv/agentkv/gateway"
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

// rollout runs cfg's programs through an agentkv gateway (package
// gateway's Stack, served on a loopback port) in front of the vLLM-compatible
// servers at urls: the programs speak HTTP to the gateway only, as a
// rollout framework's workers would.
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
	d := &driver{cfg: cfg, base: "http://" + ln.Addr().String(), hc: hc}
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
	d.sum.Admission = st.Router().AdmissionStats()
	return d.sum, errors.Join(errs...)
}

type driver struct {
	cfg  config
	base string // the gateway's URL
	hc   *http.Client

	mu  sync.Mutex // guards sum
	sum summary
}

// program runs one agent program: turns with tool gaps, each a
// /v1/completions request to the gateway with the program's whole context
// as token ids and ThunderAgent's program_id in the body; admission holds a
// request inside the gateway while the program is paused or queued. After
// the last turn the program is released (ThunderAgent's
// POST /programs/release), which frees its place for waiting programs.
func (d *driver) program(ctx context.Context, p int) error {
	rng := rand.New(rand.NewPCG(d.cfg.Seed, uint64(p)))
	id := "program-" + strconv.Itoa(p)
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

// complete sends one turn; waited is how long admission held it
// (the gateway's X-Agentkv-Waited-Ms).
func (d *driver) complete(ctx context.Context, program string, prompt []uint32) ([]uint32, completion, time.Duration, error) {
	var c completion
	body, _ := json.Marshal(map[string]any{"model": d.cfg.Model, "prompt": prompt, "max_tokens": d.cfg.Output,
		"ignore_eos": true, "return_token_ids": true, "program_id": program})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.base+gateway.CompletionsPath, bytes.NewReader(body))
	if err != nil {
		return nil, c, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
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
	if err := json.Unmarshal(b, &c); err != nil || len(c.Choices) == 0 {
		return nil, c, 0, fmt.Errorf("unreadable completion: %.200s", b)
	}
	ms, _ := strconv.ParseFloat(resp.Header.Get(gateway.HeaderWaited), 64)
	return c.Choices[0].TokenIDs, c, time.Duration(ms * float64(time.Millisecond)), nil
}

// release ends the program (ThunderAgent's end-of-program call).
func (d *driver) release(ctx context.Context, program string) error {
	body, _ := json.Marshal(map[string]string{"program_id": program})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.base+gateway.ReleasePath, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: release returned %d", program, resp.StatusCode)
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
	flag.IntVar(&cfg.Programs, "programs", 256, "concurrent agent programs")
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
