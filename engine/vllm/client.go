package vllm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
)

// HTTP errors.
var (
	// ErrStatus reports a non-2xx reply from the engine; see *StatusError.
	ErrStatus = errors.New("vllm: engine returned an error status")
	// ErrUnsupportedPrompt reports a request whose prompt /tokenize cannot
	// take (a batch of prompts, say).
	ErrUnsupportedPrompt = errors.New("vllm: prompt shape not supported by /tokenize")
	// ErrBadURL reports an unusable base URL.
	ErrBadURL = errors.New("vllm: bad engine URL")
)

// StatusError is a non-2xx reply. It matches ErrStatus.
type StatusError struct {
	Code int
	Body string // the first KiB of the reply
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("vllm: engine returned %d: %s", e.Code, e.Body)
}

// Is makes errors.Is(err, ErrStatus) true.
func (e *StatusError) Is(target error) bool { return target == ErrStatus }

// Client talks to one engine's OpenAI-compatible HTTP server. A Client is
// safe for concurrent use.
type Client struct {
	base *url.URL
	hc   *http.Client
	kept *keptPoster // the /tokenize hop without net/http's loops; nil: through hc
}

// NewClient returns a Client for the server at baseURL ("http://host:8000").
// A nil hc means http.DefaultClient.
func NewClient(baseURL string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: %q", ErrBadURL, baseURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: u, hc: hc, kept: newKeptPoster(u, hc)}, nil
}

// CloseIdleConnections closes the idle connections that Tokenize keeps to
// the engine outside the http.Client (an http:// engine's /tokenize hop
// has its own; see Tokenize). The http.Client's, shared between Clients,
// are its owner's to close.
func (c *Client) CloseIdleConnections() {
	if c.kept != nil {
		c.kept.closeIdle()
	}
}

// URL returns the absolute URL of path on the engine.
func (c *Client) URL(path string) string {
	u := *c.base
	u.Path += path
	return u.String()
}

func (c *Client) do(ctx context.Context, method, path string, hdr http.Header, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.URL(path), rd)
	if err != nil {
		return nil, err
	}
	for k, vs := range hdr {
		if hopByHop[http.CanonicalHeaderKey(k)] {
			continue
		}
		req.Header[k] = vs
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.hc.Do(req)
}

var hopByHop = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true, "Content-Length": true,
	"Host": true, "Accept-Encoding": true,
}

func statusErr(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxStatusBody))
	return newStatusError(resp.StatusCode, b)
}

// maxStatusBody is how much of an error reply a StatusError keeps.
const maxStatusBody = 1024

// newStatusError is the StatusError of code with the start of body.
func newStatusError(code int, body []byte) *StatusError {
	return &StatusError{Code: code, Body: string(body[:min(len(body), maxStatusBody)])}
}

// CacheConfigs fetches /metrics and parses vllm:cache_config_info.
func (c *Client) CacheConfigs(ctx context.Context) ([]CacheConfig, error) {
	resp, err := c.do(ctx, http.MethodGet, "/metrics", nil, nil)
	if err != nil {
		return nil, fmt.Errorf("vllm: metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, statusErr(resp)
	}
	return ParseCacheConfigs(resp.Body)
}

// Metrics fetches /metrics and returns the samples of one metric.
func (c *Client) Metrics(ctx context.Context, name string) ([]Sample, error) {
	resp, err := c.do(ctx, http.MethodGet, "/metrics", nil, nil)
	if err != nil {
		return nil, fmt.Errorf("vllm: metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, statusErr(resp)
	}
	return ParseSamples(resp.Body, name)
}

// KV cache usage metrics, newest name first: vLLM renamed
// gpu_cache_usage_perc to kv_cache_usage_perc (0.10).
const (
	KVCacheUsageMetric    = "vllm:kv_cache_usage_perc"
	oldKVCacheUsageMetric = "vllm:gpu_cache_usage_perc"
)

// maxMetricsBody bounds how much of /metrics KVCacheUsage reads.
const maxMetricsBody = 16 << 20

// KVCacheUsage fetches /metrics and returns the engine's KV cache usage:
// the fraction of its KV blocks held by requests (blocks only cached
// count as free), in [0, 1]; with several engines (data-parallel ranks)
// the mean over them. It reads vllm:kv_cache_usage_perc, or the older
// vllm:gpu_cache_usage_perc, and returns an error wrapping ErrNoMetric
// when neither is there.
func (c *Client) KVCacheUsage(ctx context.Context) (float64, error) {
	resp, err := c.do(ctx, http.MethodGet, "/metrics", nil, nil)
	if err != nil {
		return 0, fmt.Errorf("vllm: metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return 0, statusErr(resp)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMetricsBody))
	if err != nil {
		return 0, fmt.Errorf("vllm: metrics: %w", err)
	}
	for _, name := range []string{KVCacheUsageMetric, oldKVCacheUsageMetric} {
		ss, err := ParseSamples(bytes.NewReader(body), name)
		if err != nil {
			return 0, err
		}
		if len(ss) == 0 {
			continue
		}
		var sum float64
		for _, s := range ss {
			if math.IsNaN(s.Value) {
				return 0, fmt.Errorf("%w: %s is NaN", ErrMetricsSyntax, name)
			}
			sum += min(max(s.Value, 0), 1)
		}
		return sum / float64(len(ss)), nil
	}
	return 0, fmt.Errorf("%w: %s", ErrNoMetric, KVCacheUsageMetric)
}

// Usage is what a completion reported about itself.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	CachedTokens     int  // usage.prompt_tokens_details.cached_tokens
	HasUsage         bool // the reply carried a usage object
	FinishReason     string
	ToolCalls        []string // names of the tool calls the model made, in order
	Status           int      // HTTP status of the engine's reply
	Stream           bool     // the reply was a server-sent event stream
}

// maxSniff bounds how much of a non-streamed reply Forward keeps to parse;
// the reply itself is always passed through whole.
const maxSniff = 64 << 20

// Forward sends an OpenAI request body to path on the engine
// ("/v1/chat/completions" or "/v1/completions"), copies the reply to w as
// it arrives (flushing after every read when w is an http.Flusher, so
// streams stay streams), and returns what the reply said about usage,
// finish reason and tool calls: from the JSON body, or from the chunks of
// an SSE stream (usage comes only in the final chunk, and only when the
// request asked for stream_options.include_usage; see EnsureStreamUsage).
// hdr is copied onto the request minus hop-by-hop headers. A non-2xx reply
// is still copied to w; Forward then also returns a *StatusError.
func (c *Client) Forward(ctx context.Context, w http.ResponseWriter, path string, hdr http.Header, body []byte) (Usage, error) {
	resp, err := c.do(ctx, http.MethodPost, path, hdr, body)
	if err != nil {
		return Usage{}, fmt.Errorf("vllm: forward %s: %w", path, err)
	}
	defer resp.Body.Close()
	u := Usage{Status: resp.StatusCode}
	for k, vs := range resp.Header {
		if !hopByHop[k] {
			w.Header()[k] = vs
		}
	}
	w.WriteHeader(resp.StatusCode)
	fl, _ := w.(http.Flusher)
	u.Stream = strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	var sse sseParser
	var whole bytes.Buffer
	buf := make([]byte, 32<<10)
	var copyErr error
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil && copyErr == nil {
				copyErr = werr // the client went away; keep reading to learn usage
			}
			if fl != nil && copyErr == nil {
				fl.Flush()
			}
			if u.Stream {
				sse.feed(buf[:n], &u)
			} else if whole.Len()+n <= maxSniff {
				whole.Write(buf[:n])
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return u, fmt.Errorf("vllm: forward %s: reading reply: %w", path, rerr)
		}
	}
	if u.Stream {
		sse.flush(&u)
	} else {
		parseReply(whole.Bytes(), &u)
	}
	if resp.StatusCode/100 != 2 {
		b := whole.Bytes()
		if len(b) > 1024 {
			b = b[:1024]
		}
		return u, &StatusError{Code: resp.StatusCode, Body: string(b)}
	}
	if copyErr != nil {
		return u, fmt.Errorf("vllm: forward %s: writing reply: %w", path, copyErr)
	}
	return u, nil
}

// reply covers the parts of a completion, chat completion or stream chunk
// that Forward reports.
type reply struct {
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Choices []struct {
		FinishReason *string `json:"finish_reason"`
		Message      *struct {
			ToolCalls []toolCall `json:"tool_calls"`
		} `json:"message"`
		Delta *struct {
			ToolCalls []toolCall `json:"tool_calls"`
		} `json:"delta"`
	} `json:"choices"`
}

type toolCall struct {
	Function struct {
		Name string `json:"name"`
	} `json:"function"`
}

func (r *reply) into(u *Usage) {
	if r.Usage != nil {
		u.HasUsage = true
		u.PromptTokens = r.Usage.PromptTokens
		u.CompletionTokens = r.Usage.CompletionTokens
		if d := r.Usage.PromptTokensDetails; d != nil {
			u.CachedTokens = d.CachedTokens
		}
	}
	for _, ch := range r.Choices {
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			u.FinishReason = *ch.FinishReason
		}
		var calls []toolCall
		if ch.Message != nil {
			calls = ch.Message.ToolCalls
		}
		if ch.Delta != nil {
			calls = ch.Delta.ToolCalls
		}
		for _, tc := range calls {
			// In a stream only a call's first delta carries its name.
			if tc.Function.Name != "" {
				u.ToolCalls = append(u.ToolCalls, tc.Function.Name)
			}
		}
	}
}

func parseReply(b []byte, u *Usage) {
	var r reply
	if json.Unmarshal(b, &r) == nil {
		r.into(u)
	}
}

// sseParser splits a server-sent event stream into data lines and parses
// each JSON chunk. Lines longer than maxSSELine are skipped.
type sseParser struct {
	line []byte
	skip bool
}

const maxSSELine = 4 << 20

func (p *sseParser) feed(b []byte, u *Usage) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if len(p.line)+len(b) > maxSSELine {
				p.skip, p.line = true, p.line[:0]
			} else if !p.skip {
				p.line = append(p.line, b...)
			}
			return
		}
		if !p.skip && len(p.line)+i <= maxSSELine {
			p.line = append(p.line, b[:i]...)
			p.handle(u)
		}
		p.line, p.skip = p.line[:0], false
		b = b[i+1:]
	}
}

func (p *sseParser) flush(u *Usage) {
	if len(p.line) > 0 && !p.skip {
		p.handle(u)
	}
	p.line = p.line[:0]
}

func (p *sseParser) handle(u *Usage) {
	l := bytes.TrimRight(p.line, "\r")
	data, ok := bytes.CutPrefix(l, []byte("data:"))
	if !ok {
		return
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 || bytes.Equal(data, []byte("[DONE]")) {
		return
	}
	parseReply(data, u)
}

// EnsureStreamUsage returns body with stream_options.include_usage set when
// the request streams and does not say otherwise, so the final chunk
// carries usage. Other bodies come back unchanged.
func EnsureStreamUsage(body []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("vllm: request body: %w", err)
	}
	var stream bool
	if json.Unmarshal(m["stream"], &stream) != nil || !stream {
		return body, nil
	}
	var so map[string]json.RawMessage
	if raw, ok := m["stream_options"]; ok && json.Unmarshal(raw, &so) == nil && so != nil {
		if _, set := so["include_usage"]; set {
			return body, nil
		}
	}
	if so == nil {
		so = map[string]json.RawMessage{}
	}
	so["include_usage"] = json.RawMessage("true")
	raw, _ := json.Marshal(so)
	m["stream_options"] = raw
	return json.Marshal(m)
}
