package mock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentkv/agentkv/engine/sim"
	"github.com/agentkv/agentkv/engine/vllm"
	"github.com/agentkv/agentkv/internal/apiwire"
	"github.com/agentkv/agentkv/internal/wordtok"
)

// Defaults of a zero Config.
const (
	DefaultListen       = "127.0.0.1:0"
	DefaultModel        = "agentkv-mock"
	DefaultMaxModelLen  = 131072
	DefaultMaxBody      = 32 << 20
	DefaultReplayBuffer = 10000 // batches, vLLM's default replay buffer
	DefaultMinOutput    = 16
	DefaultMaxOutput    = 128
)

// API names a front-door API the mock can serve natively.
type API string

// The APIs.
const (
	APIChat        API = "chat"        // POST /v1/chat/completions
	APICompletions API = "completions" // POST /v1/completions
	APIResponses   API = "responses"   // POST /v1/responses
	APIMessages    API = "messages"    // POST /v1/messages and /v1/messages/count_tokens
)

// TokenAPI names a token-in, token-out API the mock can serve.
type TokenAPI string

// The token APIs.
const (
	TokenGenerate  TokenAPI = "generate"  // SGLang POST /generate
	TokenInference TokenAPI = "inference" // vLLM POST /inference/v1/generate
)

// AllAPIs lists every API, the default of Config.APIs.
var AllAPIs = []API{APIChat, APICompletions, APIResponses, APIMessages}

// Errors.
var (
	// ErrConfig reports an invalid Config.
	ErrConfig = errors.New("mock: bad config")
	// ErrTooLong reports a request whose prompt and output can never fit
	// the model length or the KV cache.
	ErrTooLong = errors.New("mock: request too long")
	// ErrRestarted fails the requests in flight when the worker restarts.
	ErrRestarted = errors.New("mock: worker restarted")
	// ErrClosed is returned by calls on a closed Server.
	ErrClosed = errors.New("mock: server closed")
)

// Config configures a Server. Zero fields mean the documented defaults.
type Config struct {
	// Listen is the HTTP address; "" means 127.0.0.1:0 (a free port).
	Listen string
	// Events is the ZMQ PUB endpoint of the KV events, as vLLM's
	// --kv-events-config endpoint ("tcp://127.0.0.1:0" picks a free
	// port); "" publishes none.
	Events string
	// Replay is the ZMQ ROUTER replay endpoint (vLLM's replay_endpoint);
	// "" means none. It needs Events.
	Replay string
	// Topic is the events' topic frame; "" as vLLM's default.
	Topic string
	// Encoding is the events' wire shape; the zero value is the older
	// vLLM shape (tagged arrays, integer hashes).
	Encoding vllm.Encoding
	// ReplayBuffer is how many batches the replay socket keeps; 0 means
	// 10,000.
	ReplayBuffer int
	// Model is the served model name; "" means "agentkv-mock". Aliases
	// are further names accepted in requests ("*" accepts any).
	Model   string
	Aliases []string
	// Speedup divides every modelled duration (a step of 30 ms takes
	// 30 µs at 1000); 0 means 1.
	Speedup float64
	// Engine configures the simulated engine (block size, KV blocks, host
	// tier, batch limits, timing); the zero value means engine/sim's
	// defaults (16-token blocks, Llama-3-8B on an A100).
	Engine sim.Config
	// MaxModelLen bounds prompt plus output tokens; 0 means 131,072.
	MaxModelLen int
	// MinOutput and MaxOutput bound the length of a reply: it is drawn
	// uniformly in [MinOutput, MaxOutput] from a hash of the prompt
	// (deterministic), and cut to the request's max_tokens when that is
	// shorter; 0 means 16 and 128.
	MinOutput, MaxOutput int
	// APIs are served natively; the others answer 404 as an older vLLM
	// does. nil means AllAPIs.
	APIs []API
	// TokenAPIs are the token APIs served (SGLang's /generate, vLLM's
	// /inference/v1/generate); the others answer 404. nil means both.
	// /v1/completions with a token-id prompt follows APIs.
	TokenAPIs []TokenAPI
	// MaxBodyBytes bounds a request body (413 beyond); 0 means 32 MiB.
	MaxBodyBytes int64
	// Faults are the fault switches in force from the start.
	Faults Faults
	// Hints configures KV hint execution (hints.go).
	Hints HintConfig
	// Logger receives warnings; nil discards.
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.Model == "" {
		c.Model = DefaultModel
	}
	if c.Speedup == 0 {
		c.Speedup = 1
	}
	if c.MaxModelLen == 0 {
		c.MaxModelLen = DefaultMaxModelLen
	}
	if c.MinOutput == 0 {
		c.MinOutput = DefaultMinOutput
	}
	if c.MaxOutput == 0 {
		c.MaxOutput = max(DefaultMaxOutput, c.MinOutput)
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBody
	}
	if c.ReplayBuffer == 0 {
		c.ReplayBuffer = DefaultReplayBuffer
	}
	if c.APIs == nil {
		c.APIs = AllAPIs
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.Speedup < 0 || c.Speedup > 1e9:
		return c, fmt.Errorf("%w: speedup %v", ErrConfig, c.Speedup)
	case c.MinOutput < 1 || c.MaxOutput < c.MinOutput:
		return c, fmt.Errorf("%w: output length [%d, %d]", ErrConfig, c.MinOutput, c.MaxOutput)
	case c.MaxModelLen < 2:
		return c, fmt.Errorf("%w: max model length %d", ErrConfig, c.MaxModelLen)
	case c.MaxBodyBytes < 0 || c.ReplayBuffer < 0:
		return c, fmt.Errorf("%w: negative limit", ErrConfig)
	case c.Replay != "" && c.Events == "":
		return c, fmt.Errorf("%w: a replay endpoint needs an events endpoint", ErrConfig)
	}
	for _, a := range c.APIs {
		if !slices.Contains(AllAPIs, a) {
			return c, fmt.Errorf("%w: unknown API %q", ErrConfig, a)
		}
	}
	return c, c.Faults.validate()
}

// Server is one mock vLLM worker: an HTTP server for the OpenAI and
// Anthropic APIs, /tokenize, /detokenize, /health, /v1/models, /metrics
// and /admin/fault, a simulated engine stepped in real time, and the KV
// event publisher. It is safe for concurrent use.
type Server struct {
	cfg    Config
	drv    *driver
	pub    *publisher
	tok    *wordtok.Tokenizer
	apis   map[API]bool
	mux    *http.ServeMux
	srv    *http.Server
	addr   string // the bound HTTP address
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ids    atomic.Uint64
	start  int64 // unix seconds

	faults faultState
	rl     *rlState // token APIs and RL control endpoints (control.go)
	hints  hintState

	mu       sync.Mutex // guards ln, closed, refusing
	ln       net.Listener
	closed   bool
	refusing bool
}

// Start validates cfg, binds the HTTP listener and the event sockets, and
// serves in the background until Close.
func Start(cfg Config) (*Server, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: c, tok: wordtok.New(wordtok.Config{}), apis: map[API]bool{}, start: time.Now().Unix()}
	for _, a := range c.APIs {
		s.apis[a] = true
	}
	if c.Events != "" {
		if s.pub, err = newPublisher(c.Events, c.Replay, c.Topic, c.Encoding, c.ReplayBuffer); err != nil {
			return nil, err
		}
	}
	if s.drv, err = newDriver(c.Engine, c.Speedup, s.pub); err != nil {
		s.closePub()
		return nil, err
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		s.closePub()
		return nil, fmt.Errorf("mock: listen %s: %w", c.Listen, err)
	}
	s.ln, s.addr = ln, ln.Addr().String()
	s.mux = s.routes()
	s.srv = &http.Server{Handler: s.mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.drv.run(ctx)
	}()
	s.serve(ln)
	s.SetFaults(c.Faults)
	return s, nil
}

func (s *Server) closePub() {
	if s.pub != nil {
		s.pub.close()
	}
}

func (s *Server) serve(ln net.Listener) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.srv.Serve(ln)
	}()
}

// Close stops the server: open connections are closed, the engine stops,
// the event sockets close. It is safe to call more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.faults.stopTimers()
	s.srv.Close()
	s.cancel()
	s.wg.Wait()
	s.closePub()
	return nil
}

// URL returns the server's base URL, "http://127.0.0.1:PORT".
func (s *Server) URL() string { return "http://" + s.addr }

// Addr returns the bound HTTP address.
func (s *Server) Addr() string { return s.addr }

// EventsEndpoint and ReplayEndpoint return the bound ZMQ endpoints
// ("tcp://127.0.0.1:PORT"), "" when not configured.
func (s *Server) EventsEndpoint() string {
	if s.pub == nil {
		return ""
	}
	e, _ := s.pub.endpoints()
	return e
}

// ReplayEndpoint returns the bound replay endpoint, "" when none.
func (s *Server) ReplayEndpoint() string {
	if s.pub == nil {
		return ""
	}
	_, r := s.pub.endpoints()
	return r
}

// Model returns the served model name.
func (s *Server) Model() string { return s.cfg.Model }

// BlockSize returns the engine's KV block size in tokens.
func (s *Server) BlockSize() int { return s.drv.simCfg.BlockSize }

// Tokenizer returns the server's tokenizer (the same ids as any
// wordtok.Tokenizer; this one has learned the words the server saw).
func (s *Server) Tokenizer() *wordtok.Tokenizer { return s.tok }

// Restart empties the worker as a restarted vLLM: requests in flight fail
// (their streams are cut), the KV cache is empty, AllBlocksCleared is
// published and the event sequence starts over from 0.
func (s *Server) Restart() error { return s.drv.restart() }

func (s *Server) routes() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("POST /v1/chat/completions", s.native(APIChat, generates(s, false, s.chatTurn, s.chat)))
	m.HandleFunc("POST /v1/completions", s.native(APICompletions, s.completionsAPI(generates(s, false, s.completionTurn, s.completions))))
	m.HandleFunc("POST /v1/responses", s.native(APIResponses, generates(s, false, s.responsesTurn, s.responses)))
	m.HandleFunc("POST /v1/messages", s.native(APIMessages, generates(s, true, s.messagesTurn, s.messages)))
	m.HandleFunc("POST /v1/messages/count_tokens", s.native(APIMessages, s.countTokens))
	s.rl = newRLState()
	m.HandleFunc("POST /generate", s.tokenAPI(TokenGenerate, s.sglGenerate))
	m.HandleFunc("POST /inference/v1/generate", s.tokenAPI(TokenInference, s.vllmGenerate))
	m.HandleFunc("POST /abort_request", s.abortRequest)
	m.HandleFunc("POST /abort_requests", s.abortRequests)
	m.HandleFunc("POST /pause_generation", s.pauseGeneration)
	m.HandleFunc("POST /continue_generation", s.continueGeneration)
	m.HandleFunc("/flush_cache", s.flushCache)
	m.HandleFunc("POST /update_weights_from_disk", s.updateWeights)
	m.HandleFunc("POST /update_weights_from_tensor", s.updateWeights)
	m.HandleFunc("POST /update_weights_from_distributed", s.updateWeights)
	m.HandleFunc("GET /get_weight_version", s.getWeightVersion)
	m.HandleFunc("GET /get_model_info", s.getModelInfo)
	m.HandleFunc("POST /pause", s.vllmPause)
	m.HandleFunc("POST /resume", s.vllmResume)
	m.HandleFunc("GET /is_paused", s.vllmIsPaused)
	m.HandleFunc("POST /reset_prefix_cache", s.resetPrefixCache)
	m.HandleFunc("POST /sleep", s.vllmSleep)
	m.HandleFunc("POST /wake_up", s.vllmWakeUp)
	m.HandleFunc("GET /is_sleeping", s.vllmIsSleeping)
	m.HandleFunc("POST /tokenize", s.tokenize)
	m.HandleFunc("POST /detokenize", s.detokenize)
	m.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	m.HandleFunc("GET /v1/models", s.models)
	m.HandleFunc("GET /metrics", s.metrics)
	m.HandleFunc("GET /admin/fault", s.adminGet)
	m.HandleFunc("POST /admin/fault", s.adminPost)
	s.hintRoutes(m)
	m.HandleFunc("/", s.notFound)
	return m
}

// native serves h when api is enabled, else 404 as an unknown route.
func (s *Server) native(api API, h http.HandlerFunc) http.HandlerFunc {
	if !s.apis[api] {
		return s.notFound
	}
	return h
}

// tokenAPI serves h when Config.TokenAPIs has api (or is nil), else 404.
func (s *Server) tokenAPI(api TokenAPI, h http.HandlerFunc) http.HandlerFunc {
	if s.cfg.TokenAPIs != nil && !slices.Contains(s.cfg.TokenAPIs, api) {
		return s.notFound
	}
	return h
}

func isAnthropicPath(p string) bool { return strings.HasPrefix(p, "/v1/messages") }

func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	msg := fmt.Sprintf("%s %s: not found", r.Method, r.URL.Path)
	if isAnthropicPath(r.URL.Path) {
		apiwire.WriteAnthropicError(w, http.StatusNotFound, msg)
		return
	}
	apiwire.WriteOpenAIError(w, http.StatusNotFound, msg)
}

// readBody reads a bounded request body; false when it wrote the error.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, anthropic bool) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.fail(w, anthropic, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", mbe.Limit))
		} else {
			s.fail(w, anthropic, http.StatusBadRequest, "reading the request body: "+err.Error())
		}
		return nil, false
	}
	return b, true
}

func (s *Server) fail(w http.ResponseWriter, anthropic bool, status int, msg string) {
	if anthropic {
		apiwire.WriteAnthropicError(w, status, msg)
		return
	}
	apiwire.WriteOpenAIError(w, status, msg)
}

// checkModel reports whether name is served ("" is the served model).
func (s *Server) checkModel(name string) bool {
	if name == "" || name == s.cfg.Model {
		return true
	}
	for _, a := range s.cfg.Aliases {
		if a == "*" || a == name {
			return true
		}
	}
	return false
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("anthropic-version") != "" {
		id := s.cfg.Model
		apiwire.WriteJSON(w, http.StatusOK, apiwire.AnthropicModelList{
			Data:    []apiwire.AnthropicModel{{Type: "model", ID: id, DisplayName: id, CreatedAt: time.Unix(s.start, 0).UTC().Format(time.RFC3339)}},
			FirstID: &id, LastID: &id})
		return
	}
	apiwire.WriteJSON(w, http.StatusOK, apiwire.ModelList{Object: apiwire.ObjectList, Data: []apiwire.Model{{
		ID: s.cfg.Model, Object: apiwire.ObjectModel, Created: s.start, OwnedBy: "agentkv", Root: s.cfg.Model, MaxModelLen: s.cfg.MaxModelLen}}})
}

func (s *Server) nextID(prefix string) string {
	return fmt.Sprintf("%s%x%06x", prefix, s.start, s.ids.Add(1))
}
