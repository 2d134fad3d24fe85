package translate

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/agentkv/agentkv/internal/tokenapi"
)

// TokenAPI names one of the token-in, token-out APIs of the engines that
// RL rollout frameworks call.
type TokenAPI uint8

// The token APIs.
const (
	// TokenGenerate is SGLang's POST /generate ({"rid", "input_ids",
	// "sampling_params", "return_logprob"} → {"text", "output_ids",
	// "meta_info"}).
	TokenGenerate TokenAPI = iota + 1
	// TokenInference is vLLM's POST /inference/v1/generate ({"token_ids",
	// "sampling_params"} → {"choices": [{"token_ids", "logprobs"}]}).
	TokenInference
	// TokenCompletions is OpenAI's POST /v1/completions with a token-id
	// prompt, return_tokens_as_token_ids and logprobs (vLLM serves it;
	// AReaL's path to vLLM).
	TokenCompletions
)

// Token API paths.
const (
	GeneratePath          = "/generate"
	InferenceGeneratePath = "/inference/v1/generate"
)

var tokenAPINames = [...]string{"", "generate", "inference", "completions"}

// String returns the token API's name: generate, inference or completions.
func (a TokenAPI) String() string {
	if a > 0 && int(a) < len(tokenAPINames) {
		return tokenAPINames[a]
	}
	return "unknown"
}

// Path returns the token API's request path.
func (a TokenAPI) Path() string {
	switch a {
	case TokenGenerate:
		return GeneratePath
	case TokenInference:
		return InferenceGeneratePath
	case TokenCompletions:
		return CompletionsPath
	}
	return ""
}

// TokenAPIs is a set of token APIs; the zero value means all of them (a
// worker that declares none is taken to serve both engines' token APIs,
// as the mock worker and the gateway's earlier pass-through assumed).
type TokenAPIs uint8

// AllTokenAPIs is every token API.
const AllTokenAPIs = TokenAPIs(1<<TokenGenerate | 1<<TokenInference | 1<<TokenCompletions)

// TokenAPISet returns the set of the given token APIs.
func TokenAPISet(as ...TokenAPI) TokenAPIs {
	var s TokenAPIs
	for _, a := range as {
		s |= 1 << a
	}
	return s
}

// Has reports whether a is in s (the zero set has every API).
func (s TokenAPIs) Has(a TokenAPI) bool { return s == 0 || s&(1<<a) != 0 }

// String lists the set's token APIs joined by '+'.
func (s TokenAPIs) String() string {
	var b []string
	for a := TokenGenerate; a <= TokenCompletions; a++ {
		if s.Has(a) {
			b = append(b, a.String())
		}
	}
	return strings.Join(b, "+")
}

// Names lists the set's token API names.
func (s TokenAPIs) Names() []string {
	var b []string
	for a := TokenGenerate; a <= TokenCompletions; a++ {
		if s.Has(a) {
			b = append(b, a.String())
		}
	}
	return b
}

// ParseTokenAPI returns the token API named s ("generate", "inference",
// "completions"; the paths are accepted too).
func ParseTokenAPI(s string) (TokenAPI, bool) {
	for a := TokenGenerate; a <= TokenCompletions; a++ {
		if s == a.String() || s == a.Path() {
			return a, true
		}
	}
	return 0, false
}

// ParseTokenAPIs parses token API names separated by '+' or ',' ("all":
// every one). An empty list is refused.
func ParseTokenAPIs(s string) (TokenAPIs, bool) {
	var set TokenAPIs
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == '+' || r == ',' }) {
		f = strings.TrimSpace(f)
		if f == "all" {
			set |= AllTokenAPIs
			continue
		}
		a, ok := ParseTokenAPI(f)
		if !ok {
			return 0, false
		}
		set |= 1 << a
	}
	return set, set != 0
}

// TokenRequest is a token-API request in neither engine's shape: what
// translation carries from the client's API to the worker's. Sampling
// holds the sampling parameters under vLLM's names (max_tokens,
// min_tokens; SGLang's max_new_tokens and min_new_tokens are renamed),
// every other parameter as the client sent it.
type TokenRequest struct {
	RID    string
	Tokens []uint32
	Stream bool
	Model  string
	// Logprobs: the client asked for the sampled tokens' logprobs;
	// TopLogprobs alternatives per token beyond them.
	Logprobs    bool
	TopLogprobs int
	Sampling    map[string]json.RawMessage
	CacheSalt   *string
	// IncludeUsage: a vLLM client's stream_options.include_usage.
	IncludeUsage bool
}

// sglangNames renames SGLang's sampling parameters to vLLM's.
var sglangNames = map[string]string{"max_new_tokens": "max_tokens", "min_new_tokens": "min_tokens"}

// ReadTokenRequest reads a token-API body of api whose prompt the caller
// parsed as tokens. A text prompt cannot be translated (no tokenizer).
func ReadTokenRequest(api TokenAPI, body []byte, tokens []uint32) (*TokenRequest, error) {
	tr := &TokenRequest{Tokens: tokens, Sampling: map[string]json.RawMessage{}}
	var sampling json.RawMessage
	switch api {
	case TokenGenerate:
		var req struct {
			RID            *string         `json:"rid"`
			Text           *string         `json:"text"`
			Sampling       json.RawMessage `json:"sampling_params"`
			ReturnLogprob  bool            `json:"return_logprob"`
			TopLogprobsNum int             `json:"top_logprobs_num"`
			Stream         bool            `json:"stream"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, badRequest("malformed JSON body: %v", err)
		}
		if len(tokens) == 0 {
			return nil, badRequest("input_ids are required: a text prompt cannot be translated to the worker's token API (no tokenizer)")
		}
		if req.RID != nil {
			tr.RID = *req.RID
		}
		tr.Stream, tr.Logprobs, tr.TopLogprobs, sampling = req.Stream, req.ReturnLogprob, req.TopLogprobsNum, req.Sampling
	case TokenInference:
		var req struct {
			RID           string          `json:"request_id"`
			Model         string          `json:"model"`
			Sampling      json.RawMessage `json:"sampling_params"`
			Stream        bool            `json:"stream"`
			StreamOptions *struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
			CacheSalt *string `json:"cache_salt"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, badRequest("malformed JSON body: %v", err)
		}
		tr.RID, tr.Model, tr.Stream, tr.CacheSalt, sampling = req.RID, req.Model, req.Stream, req.CacheSalt, req.Sampling
		tr.IncludeUsage = req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	default:
		return nil, badRequest("token API %v cannot be read", api)
	}
	if tr.TopLogprobs < 0 {
		return nil, badRequest("top_logprobs_num must not be negative")
	}
	if len(sampling) > 0 && string(sampling) != "null" {
		var sp map[string]json.RawMessage
		if err := json.Unmarshal(sampling, &sp); err != nil {
			return nil, badRequest("sampling_params: %v", err)
		}
		for k, v := range sp {
			if n, ok := sglangNames[k]; ok && api == TokenGenerate {
				k = n
			}
			tr.Sampling[k] = v
		}
	}
	if api == TokenInference {
		if lp, ok := tr.Sampling["logprobs"]; ok {
			delete(tr.Sampling, "logprobs")
			if string(lp) != "null" {
				if err := json.Unmarshal(lp, &tr.TopLogprobs); err != nil || tr.TopLogprobs < 0 {
					return nil, badRequest("sampling_params.logprobs must be a non-negative integer")
				}
				tr.Logprobs = true
			}
		}
	}
	return tr, nil
}

// EncodeTokenRequest writes tr as a request body of api. For
// TokenCompletions it asks for logprobs (at least 0) and
// return_tokens_as_token_ids whatever the client asked: the completions
// API returns token ids only there.
func EncodeTokenRequest(api TokenAPI, tr *TokenRequest) ([]byte, error) {
	out := map[string]any{}
	sp := map[string]json.RawMessage{}
	for k, v := range tr.Sampling {
		sp[k] = v
	}
	idsKey := "token_ids"
	if tr.Stream {
		out["stream"] = true
	}
	switch api {
	case TokenGenerate:
		for from, to := range sglangNames {
			if v, ok := sp[to]; ok {
				delete(sp, to)
				sp[from] = v
			}
		}
		idsKey, out["sampling_params"] = "input_ids", sp
		if tr.RID != "" {
			out["rid"] = tr.RID
		}
		if tr.Logprobs {
			out["return_logprob"] = true
			if tr.TopLogprobs > 0 {
				out["top_logprobs_num"] = tr.TopLogprobs
			}
		}
	case TokenInference:
		if tr.Logprobs {
			sp["logprobs"] = json.RawMessage(strconv.Itoa(tr.TopLogprobs))
		}
		out["sampling_params"] = sp
		if tr.RID != "" {
			out["request_id"] = tr.RID
		}
		if tr.Stream {
			out["stream_options"] = map[string]bool{"include_usage": true}
		}
	case TokenCompletions:
		for k, v := range sp {
			out[k] = v // vLLM's completions API takes its sampling parameters at the top level
		}
		idsKey, out["return_tokens_as_token_ids"], out["logprobs"] = "prompt", true, tr.TopLogprobs
		if tr.Stream {
			out["stream_options"] = map[string]bool{"include_usage": true}
		}
	default:
		return nil, badRequest("token API %v cannot be written", api)
	}
	if api != TokenGenerate {
		if tr.Model != "" {
			out["model"] = tr.Model
		}
		if tr.CacheSalt != nil {
			out["cache_salt"] = *tr.CacheSalt
		}
	}
	rest, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	// The ids are written directly: json.Marshal would scan them again.
	b := make([]byte, 0, len(rest)+len(idsKey)+4+11*len(tr.Tokens))
	b = append(append(append(b, `{"`...), idsKey...), `":`...)
	b = tokenapi.AppendIDs(b, tr.Tokens)
	if len(rest) > 2 {
		b = append(b, ',')
	}
	return append(b, rest[1:]...), nil
}

// TokenLogprob is one token id and its logprob.
type TokenLogprob struct {
	ID      uint32
	Logprob float64
}

// TokenChunk is a piece of a token-API reply in neither engine's shape:
// the tokens it adds, their logprobs (nil when the worker gave none) and
// top alternatives, and, on the last, the finish reason and usage.
type TokenChunk struct {
	IDs      []uint32
	Logprobs []float64
	Top      [][]TokenLogprob
	Text     string
	// Finish is "stop", "length" or "abort" ("" until the last chunk);
	// Matched the stop token that ended it (SGLang's), when known.
	Finish  string
	Matched *int64
	Usage   *TokenUsage
}

// TokenUsage is a reply's usage.
type TokenUsage struct {
	Prompt, Completion, Cached int
}
