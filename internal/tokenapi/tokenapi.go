package tokenapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// Paths of the endpoints.
const (
	GeneratePath          = "/generate"              // SGLang
	InferenceGeneratePath = "/inference/v1/generate" // vLLM
	AbortPath             = "/abort_request"         // SGLang (and the gateway for both)
)

// MaxIDs is the default bound on the token ids of one request: 2,097,152,
// above any served context length. ParseIDs refuses more.
const MaxIDs = 1 << 21

// DefaultVocab is the vocabulary of the mock worker's tokenizer (ids are
// below 2^31); receivers that know their model's vocabulary pass it.
const DefaultVocab = 1 << 31

// ErrIDs is wrapped by every error ParseIDs returns.
var ErrIDs = errors.New("tokenapi: bad token ids")

// IDsError says what is wrong with a token id array; it wraps ErrIDs.
type IDsError struct {
	Field  string // the JSON field, e.g. "input_ids"
	Reason string
}

func (e *IDsError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap returns ErrIDs.
func (e *IDsError) Unwrap() error { return ErrIDs }

// ParseIDs appends to dst the token ids of raw, a JSON array of integers,
// and returns it. It fails (with an *IDsError naming field) on anything
// else: a non-array, a nested array (a batch), a non-integer, a negative
// id, an id ≥ vocab, or more than max ids (max ≤ 0 means MaxIDs). It stops
// at the first error, so a huge array costs no more than max ids. An empty
// or absent raw gives dst unchanged and no error.
func ParseIDs(dst []uint32, raw []byte, field string, vocab uint64, max int) ([]uint32, error) {
	if max <= 0 {
		max = MaxIDs
	}
	if vocab == 0 || vocab > 1<<32 {
		vocab = 1 << 32
	}
	fail := func(format string, a ...any) ([]uint32, error) {
		return dst, &IDsError{Field: field, Reason: fmt.Sprintf(format, a...)}
	}
	i, n := skipSpace(raw, 0), len(raw)
	if i == n || (n-i == 4 && string(raw[i:]) == "null") {
		return dst, nil
	}
	if raw[i] != '[' {
		return fail("want an array of token ids")
	}
	i = skipSpace(raw, i+1)
	if i < n && raw[i] == ']' {
		if skipSpace(raw, i+1) != n {
			return fail("trailing data after the array")
		}
		return dst, nil
	}
	count := 0
	for {
		if i == n {
			return fail("unterminated array")
		}
		c := raw[i]
		switch {
		case c == '-':
			return fail("token id %d is negative", count)
		case c == '[':
			return fail("a batch of prompts is not supported: send one array of ids")
		case c < '0' || c > '9':
			return fail("token id %d is not an integer", count)
		}
		if c == '0' && i+1 < n && raw[i+1] >= '0' && raw[i+1] <= '9' {
			return fail("token id %d is not a JSON integer (leading zero)", count)
		}
		var v uint64
		for i < n && raw[i] >= '0' && raw[i] <= '9' {
			if v < vocab {
				v = v*10 + uint64(raw[i]-'0')
			}
			i++
		}
		if i < n && (raw[i] == '.' || raw[i] == 'e' || raw[i] == 'E') {
			return fail("token id %d is not an integer", count)
		}
		if v >= vocab {
			return fail("token id %d is beyond the vocabulary (%d ids)", count, vocab)
		}
		if count == max {
			return fail("more than %d token ids", max)
		}
		dst = append(dst, uint32(v))
		count++
		i = skipSpace(raw, i)
		if i == n {
			return fail("unterminated array")
		}
		switch raw[i] {
		case ',':
			i = skipSpace(raw, i+1)
		case ']':
			if skipSpace(raw, i+1) != n {
				return fail("trailing data after the array")
			}
			return dst, nil
		default:
			return fail("token id %d is not an integer", count)
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// AppendIDs appends ids as a JSON array.
func AppendIDs(b []byte, ids []uint32) []byte {
	b = append(b, '[')
	for i, t := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(t), 10)
	}
	return append(b, ']')
}

// GenerateRequest is SGLang's /generate body (GenerateReqInput), single
// prompt. Fields the receivers do not read stay in the raw body, which a
// router passes on untouched.
type GenerateRequest struct {
	// RID is the request id: a string (a list, for a batch, is refused).
	RID json.RawMessage `json:"rid,omitempty"`
	// Text is the prompt as text; InputIDs as token ids (one of them).
	Text     *string         `json:"text,omitempty"`
	InputIDs json.RawMessage `json:"input_ids,omitempty"`
	// SamplingParams is passed to the engine as is.
	SamplingParams json.RawMessage `json:"sampling_params,omitempty"`
	ReturnLogprob  bool            `json:"return_logprob,omitempty"`
	// LogprobStartLen is where input_token_logprobs start (-1, the
	// default: none).
	LogprobStartLen *int `json:"logprob_start_len,omitempty"`
	TopLogprobsNum  int  `json:"top_logprobs_num,omitempty"`
	Stream          bool `json:"stream,omitempty"`
}

// RIDString returns the request's rid when it is one string; ok is false
// for a list (a batch) or another type, "" and true when absent.
func (r *GenerateRequest) RIDString() (string, bool) {
	if len(r.RID) == 0 || string(r.RID) == "null" {
		return "", true
	}
	var s string
	if json.Unmarshal(r.RID, &s) != nil {
		return "", false
	}
	return s, true
}

// SGLangSampling is the part of SGLang's sampling_params the mock worker
// reads (max_new_tokens defaults to 128, as SGLang's SamplingParams).
type SGLangSampling struct {
	MaxNewTokens *int    `json:"max_new_tokens,omitempty"`
	StopTokenIDs []int64 `json:"stop_token_ids,omitempty"`
	IgnoreEOS    bool    `json:"ignore_eos,omitempty"`
}

// DefaultMaxNewTokens is SGLang's default max_new_tokens.
const DefaultMaxNewTokens = 128

// FinishReason is SGLang's meta_info.finish_reason.
type FinishReason struct {
	Type    string `json:"type"`              // "stop", "length" or "abort"
	Matched *int64 `json:"matched,omitempty"` // the stop token matched
	Length  int    `json:"length,omitempty"`  // for "length": the limit
	Message string `json:"message,omitempty"` // for "abort"
}

// Finish types.
const (
	FinishStop   = "stop"
	FinishLength = "length"
	FinishAbort  = "abort"
)

// MetaInfo is SGLang's meta_info. Logprob entries are [logprob, token_id,
// text-or-null] triples (input_token_logprobs' first logprob is null).
type MetaInfo struct {
	ID                  string          `json:"id"`
	FinishReason        *FinishReason   `json:"finish_reason"`
	PromptTokens        int             `json:"prompt_tokens"`
	CompletionTokens    int             `json:"completion_tokens"`
	CachedTokens        int             `json:"cached_tokens"`
	WeightVersion       string          `json:"weight_version,omitempty"`
	E2ELatency          float64         `json:"e2e_latency"`
	OutputTokenLogprobs json.RawMessage `json:"output_token_logprobs,omitempty"`
	InputTokenLogprobs  json.RawMessage `json:"input_token_logprobs,omitempty"`
	OutputTopLogprobs   json.RawMessage `json:"output_top_logprobs,omitempty"`
}

// GenerateResponse is SGLang's /generate answer (and each streamed chunk:
// text, output_ids and logprobs so far).
type GenerateResponse struct {
	Text      string          `json:"text"`
	OutputIDs json.RawMessage `json:"output_ids"`
	MetaInfo  MetaInfo        `json:"meta_info"`
}

// AbortRequest is SGLang's /abort_request body.
type AbortRequest struct {
	RID      string `json:"rid,omitempty"`
	AbortAll bool   `json:"abort_all,omitempty"`
}

// InferenceRequest is vLLM's /inference/v1/generate body.
type InferenceRequest struct {
	RequestID      string          `json:"request_id,omitempty"`
	TokenIDs       json.RawMessage `json:"token_ids"`
	SamplingParams json.RawMessage `json:"sampling_params"`
	Model          string          `json:"model,omitempty"`
	Stream         bool            `json:"stream,omitempty"`
	StreamOptions  *struct {
		IncludeUsage bool `json:"include_usage,omitempty"`
	} `json:"stream_options,omitempty"`
	CacheSalt *string `json:"cache_salt,omitempty"`
	Priority  int64   `json:"priority,omitempty"`
}

// VLLMSampling is the part of vLLM's SamplingParams the mock worker reads
// (max_tokens defaults to 16; logprobs nil means none, 0 the sampled
// token's only).
type VLLMSampling struct {
	MaxTokens    *int    `json:"max_tokens,omitempty"`
	Logprobs     *int    `json:"logprobs,omitempty"`
	StopTokenIDs []int64 `json:"stop_token_ids,omitempty"`
	IgnoreEOS    bool    `json:"ignore_eos,omitempty"`
}

// DefaultMaxTokens is vLLM's default max_tokens.
const DefaultMaxTokens = 16

// LogprobContent is one entry of vLLM's logprobs.content.
type LogprobContent struct {
	Token       string       `json:"token"`
	Logprob     float64      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []TopLogprob `json:"top_logprobs"`
}

// TopLogprob is one alternative of a LogprobContent.
type TopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// Logprobs is vLLM's choice logprobs.
type Logprobs struct {
	Content []LogprobContent `json:"content"`
}

// InferenceChoice is one choice of vLLM's answer (and of a streamed chunk,
// whose token_ids and logprobs are the new ones only).
type InferenceChoice struct {
	Index        int             `json:"index"`
	Logprobs     *Logprobs       `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
	TokenIDs     json.RawMessage `json:"token_ids"`
}

// Usage is vLLM's usage.
type Usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details,omitempty"`
}

// NewUsage returns a Usage with cached_tokens.
func NewUsage(prompt, completion, cached int) *Usage {
	u := &Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
	u.PromptTokensDetails = &struct {
		CachedTokens int `json:"cached_tokens"`
	}{cached}
	return u
}

// InferenceResponse is vLLM's /inference/v1/generate answer.
type InferenceResponse struct {
	RequestID      string            `json:"request_id"`
	Model          string            `json:"model,omitempty"`
	Created        int64             `json:"created,omitempty"`
	Choices        []InferenceChoice `json:"choices"`
	Usage          *Usage            `json:"usage,omitempty"`
	PromptLogprobs json.RawMessage   `json:"prompt_logprobs"`
}

// TokenString is how vLLM names a token returned as its id
// (return_tokens_as_token_ids).
func TokenString(id uint32) string { return "token_id:" + strconv.FormatUint(uint64(id), 10) }

// SGLangError is SGLang's error body.
type SGLangError struct {
	Error struct {
		Message string `json:"message"`
	} `json:"error"`
}

// WriteSGLangError answers {"error": {"message": msg}} with status.
func WriteSGLangError(w http.ResponseWriter, status int, msg string) {
	var e SGLangError
	e.Error.Message = msg
	b, _ := json.Marshal(e)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}
