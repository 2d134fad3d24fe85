package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Errors callers branch on.
var (
	// ErrConfig reports an invalid Config.
	ErrConfig = errors.New("loadgen: invalid config")
	// ErrUnreachable means the preflight request to the endpoint failed
	// at the transport level (refused, unresolvable, timed out): nothing
	// answered HTTP.
	ErrUnreachable = errors.New("loadgen: endpoint unreachable")
	// ErrNoModel means Config.Model is empty and the endpoint's
	// /v1/models listed no model to use instead.
	ErrNoModel = errors.New("loadgen: no model")
	// ErrWorkload reports a workload that cannot be replayed (it fails
	// trace's Validate, or is empty).
	ErrWorkload = errors.New("loadgen: bad workload")
)

// Harness selects which agent harness's session headers the requests carry.
type Harness int

const (
	// Dynamo sends the canonical x-dynamo-session-id,
	// x-dynamo-parent-session-id and x-dynamo-session-final (on a
	// session's last turn). The zero value.
	Dynamo Harness = iota
	// ClaudeCode sends X-Claude-Code-Session-Id (the root session) on every
	// request and, for a subagent, x-claude-code-agent-id (and
	// x-claude-code-parent-agent-id when the subagent's parent is itself a
	// subagent).
	ClaudeCode
	// Codex sends session-id (the root), thread-id (the session),
	// x-codex-parent-thread-id for subagents and x-codex-turn-metadata.
	Codex
	// OpenCode sends x-session-id and x-session-affinity, and
	// x-parent-session-id for subagents.
	OpenCode
)

var harnessNames = [...]string{Dynamo: "dynamo", ClaudeCode: "claude-code", Codex: "codex", OpenCode: "opencode"}

// String returns the name ParseHarness accepts.
func (h Harness) String() string {
	if h >= 0 && int(h) < len(harnessNames) {
		return harnessNames[h]
	}
	return fmt.Sprintf("Harness(%d)", int(h))
}

// ParseHarness parses "dynamo", "claude-code" (or "claude"), "codex" or
// "opencode".
func ParseHarness(s string) (Harness, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "dynamo":
		return Dynamo, nil
	case "claude-code", "claude", "claudecode":
		return ClaudeCode, nil
	case "codex":
		return Codex, nil
	case "opencode":
		return OpenCode, nil
	}
	return 0, fmt.Errorf("%w: unknown harness %q (want claude-code, codex, opencode or dynamo)", ErrConfig, s)
}

// API selects the OpenAI endpoint the requests go to.
type API int

const (
	// Chat posts to /v1/chat/completions with the prompt as one user
	// message. The zero value.
	Chat API = iota
	// Completions posts to /v1/completions with the prompt as is (no chat
	// template, so the server's prompt_tokens is closest to the trace).
	Completions
	// Responses posts to /v1/responses (OpenAI's Responses API, as Codex
	// speaks it: one input_text message, store=false, max_output_tokens)
	// and reads its event stream (response.output_text.delta ...
	// response.completed with usage.input_tokens_details.cached_tokens).
	Responses
	// Messages posts to /v1/messages (Anthropic's Messages API, as Claude
	// Code speaks it, with anthropic-version) and reads its event stream
	// (content_block_delta ... message_delta with cache_read_input_tokens).
	Messages
)

var apiNames = [...]string{Chat: "chat", Completions: "completions", Responses: "responses", Messages: "messages"}

// String returns "chat", "completions", "responses" or "messages".
func (a API) String() string {
	if a >= 0 && int(a) < len(apiNames) {
		return apiNames[a]
	}
	return fmt.Sprintf("API(%d)", int(a))
}

// path is the API's path under /v1.
func (a API) path() string {
	switch a {
	case Completions:
		return "/completions"
	case Responses:
		return "/responses"
	case Messages:
		return "/messages"
	}
	return "/chat/completions"
}

// DefaultHarness is the harness that speaks an API: Codex for Responses,
// Claude Code for Messages, Dynamo's canonical headers otherwise.
func (a API) DefaultHarness() Harness {
	switch a {
	case Responses:
		return Codex
	case Messages:
		return ClaudeCode
	}
	return Dynamo
}

// ParseAPI parses "chat", "completions", "responses" or "messages".
func ParseAPI(s string) (API, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "chat", "chat/completions":
		return Chat, nil
	case "completions", "completion":
		return Completions, nil
	case "responses":
		return Responses, nil
	case "messages", "anthropic":
		return Messages, nil
	}
	return 0, fmt.Errorf("%w: unknown api %q (want chat, completions, responses or messages)", ErrConfig, s)
}

// Defaults of Config's zero fields.
const (
	DefaultTimeout = 10 * time.Minute
	DefaultSpeed   = 1.0
)

// Config configures a Runner. Zero fields mean the documented defaults;
// Endpoint is required.
type Config struct {
	// Endpoint is the server's base URL ("http://localhost:8000"), or its
	// /v1 URL, or the full completions URL. Required; http or https.
	Endpoint string
	// API picks chat (default), plain completions, Responses or Messages.
	// Ignored when Endpoint already ends in one of their paths.
	API API
	// Model is the "model" field of every request. Empty: the first model
	// the endpoint's GET /v1/models lists.
	Model string
	// Harness picks the session headers (default Dynamo's canonical ones).
	Harness Harness
	// Concurrency bounds the agent programs running at once: a root
	// session with its subagents (and any session it waits for) in a
	// closed-loop workload, one request in an open-loop one. 0 means no
	// bound: every program starts at its Start.
	Concurrency int
	// Speed divides every think/tool delay, subagent offset, session start
	// and open-loop arrival: 2 replays twice as fast. Default 1; must be
	// positive and finite.
	Speed float64
	// MaxRequests stops sending after this many requests (0: the whole
	// workload). Requests already sent finish.
	MaxRequests int
	// Timeout bounds one request from send to the end of its stream.
	// Default 10 min.
	Timeout time.Duration
	// IgnoreEOS adds "ignore_eos": true (a vLLM / SGLang extension) so the
	// server generates exactly max_tokens tokens, as the trace recorded.
	IgnoreEOS bool
	// Seed salts the prompt vocabulary: runs with different seeds share no
	// prompt text, so one server's cache from an earlier run does not help.
	Seed uint64
	// SessionPrefix is prepended to every session id sent in headers and
	// written in results, so that repeated runs against one server do not
	// continue each other's sessions. Default "".
	SessionPrefix string
	// Header holds extra headers for every request (an Authorization,
	// for instance). It is not modified.
	Header http.Header
	// Client sends the requests. nil uses a client with a pooled
	// transport sized for the concurrency and no overall timeout (Timeout
	// bounds each request through its context).
	Client *http.Client
	// SkipPreflight skips GET /v1/models before the run. Then Model must
	// be set, and an unreachable endpoint shows as errors per request.
	SkipPreflight bool
	// OnResult, when set, is called once for every request that finished
	// (successfully or with an error, but not cancelled), from the
	// request's goroutine: it must be safe for concurrent use and should
	// not block for long. The Result is the caller's.
	OnResult func(*Result)
	// Now is the clock for timings; nil uses time.Now.
	Now func() time.Time
	// Sleep waits for d or until ctx is done, returning ctx.Err() then.
	// It is called only with d > 0. nil uses a timer. Tests inject a
	// function that returns at once and records d.
	Sleep func(ctx context.Context, d time.Duration) error
}

// resolved is a validated Config with defaults applied.
type resolved struct {
	Config
	url       string // the completions URL
	modelsURL string
}

func (c Config) resolve() (resolved, error) {
	r := resolved{Config: c}
	if r.Speed == 0 {
		r.Speed = DefaultSpeed
	}
	if math.IsNaN(r.Speed) || math.IsInf(r.Speed, 0) || r.Speed <= 0 {
		return r, fmt.Errorf("%w: speed must be positive and finite, got %v", ErrConfig, c.Speed)
	}
	if r.Timeout == 0 {
		r.Timeout = DefaultTimeout
	}
	if r.Timeout < 0 {
		return r, fmt.Errorf("%w: negative timeout %v", ErrConfig, c.Timeout)
	}
	if r.Concurrency < 0 || r.MaxRequests < 0 {
		return r, fmt.Errorf("%w: negative concurrency or max requests", ErrConfig)
	}
	if r.Harness < Dynamo || r.Harness > OpenCode {
		return r, fmt.Errorf("%w: unknown harness %d", ErrConfig, int(c.Harness))
	}
	if r.API < Chat || r.API > Messages {
		return r, fmt.Errorf("%w: unknown api %d", ErrConfig, int(c.API))
	}
	if r.SkipPreflight && r.Model == "" {
		return r, fmt.Errorf("%w: SkipPreflight needs a Model", ErrConfig)
	}
	var err error
	if r.url, r.modelsURL, r.API, err = endpointURLs(c.Endpoint, r.API); err != nil {
		return r, err
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.Sleep == nil {
		r.Sleep = sleepCtx
	}
	if r.Client == nil {
		n := max(r.Concurrency*4, 256)
		r.Client = &http.Client{Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			MaxIdleConns:        n,
			MaxIdleConnsPerHost: n,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true, // streams must not be buffered by gzip
			ForceAttemptHTTP2:   true,
		}}
	}
	return r, nil
}

// endpointURLs derives the completions URL and the models URL.
// The endpoint's own path wins over api when it names one.
func endpointURLs(endpoint string, api API) (string, string, API, error) {
	if endpoint == "" {
		return "", "", api, fmt.Errorf("%w: no endpoint", ErrConfig)
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", "", api, fmt.Errorf("%w: endpoint %q: %v", ErrConfig, endpoint, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", "", api, fmt.Errorf("%w: endpoint %q: want an http:// or https:// URL", ErrConfig, endpoint)
	}
	if u.Host == "" {
		return "", "", api, fmt.Errorf("%w: endpoint %q has no host", ErrConfig, endpoint)
	}
	p := strings.TrimRight(u.Path, "/")
	base := p
	named := false
	for _, a := range []API{Chat, Completions, Responses, Messages} { // chat before completions: a longer suffix
		if strings.HasSuffix(p, a.path()) {
			base, api, named = strings.TrimSuffix(p, a.path()), a, true
			break
		}
	}
	if !named {
		if !strings.HasSuffix(p, "/v1") {
			base = p + "/v1"
		}
		p = base + api.path()
	}
	cu, mu := *u, *u
	cu.Path, mu.Path = p, base+"/models"
	cu.RawPath, mu.RawPath = "", ""
	return cu.String(), mu.String(), api, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
