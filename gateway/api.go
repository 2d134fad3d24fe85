package gateway

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/agentkv/agentkv/gateway/translate"
	"github.com/agentkv/agentkv/internal/apiwire"
)

// The front-door APIs and their vocabulary live in package translate;
// these names keep the gateway's API whole for its users.
type (
	// API is translate.API.
	API = translate.API
	// APIs is translate.APIs.
	APIs = translate.APIs
	// Usage is translate.Usage: what a worker's reply said about a
	// request, in the chat completions vocabulary.
	Usage = translate.Usage
)

// The APIs (translate's).
const (
	Chat        = translate.Chat
	Completions = translate.Completions
	Responses   = translate.Responses
	Messages    = translate.Messages
	CountTokens = translate.CountTokens
)

// Request paths (translate's).
const (
	ChatPath        = translate.ChatPath
	CompletionsPath = translate.CompletionsPath
	ResponsesPath   = translate.ResponsesPath
	MessagesPath    = translate.MessagesPath
	CountTokensPath = translate.CountTokensPath
	ModelsPath      = translate.ModelsPath
	TokenizePath    = translate.TokenizePath
	// BillingPrefix is translate.BillingPrefix.
	BillingPrefix = translate.BillingPrefix
)

// Baseline is what every OpenAI-compatible engine serves: chat and text
// completions. Workers whose Native set is zero get it.
var Baseline = translate.Baseline

// ErrBadRequest is matched by every error about a request body the
// gateway cannot serve; the client gets 400 in its API's shape.
var ErrBadRequest = translate.ErrBadRequest

// ParseAPI returns the API named s (as API.String writes it).
func ParseAPI(s string) (API, bool) { return translate.ParseAPI(s) }

// ParseAPIs parses a comma-separated list of API names (translate.ParseAPIs).
func ParseAPIs(s string) (APIs, bool) { return translate.ParseAPIs(s) }

// APISet returns the set of the given APIs.
func APISet(as ...API) APIs { return translate.APISet(as...) }

// StripBilling removes Claude Code's billing preamble from a Messages
// request body (translate.StripBilling).
func StripBilling(body []byte) ([]byte, bool) { return translate.StripBilling(body) }

// ErrorBody returns the JSON error body of the API's family for an HTTP
// status: OpenAI's {"error":{"message","type","param","code"}} or
// Anthropic's {"type":"error","error":{"type","message"}}, with the error
// type of apiwire's table (the mock worker answers with the same).
func ErrorBody(anthropic bool, code int, msg string) []byte {
	var b []byte
	if anthropic {
		b, _ = json.Marshal(apiwire.NewAnthropicError(code, msg))
	} else {
		b, _ = json.Marshal(apiwire.NewOpenAIError(code, msg))
	}
	return b
}

// WriteError writes an error reply in the shape of the API family the
// request belongs to: Anthropic's for /v1/messages paths or when the
// request carries anthropic-version, OpenAI's otherwise.
func WriteError(w http.ResponseWriter, r *http.Request, code int, msg string) {
	writeError(w, wantsAnthropic(r), code, msg)
}

func writeError(w http.ResponseWriter, anthropic bool, code int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Del("Content-Length")
	w.WriteHeader(code)
	_, _ = w.Write(ErrorBody(anthropic, code, msg))
}

func wantsAnthropic(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, MessagesPath) || r.Header.Get("Anthropic-Version") != ""
}

// Token APIs (translate's).
type (
	// TokenAPI is translate.TokenAPI.
	TokenAPI = translate.TokenAPI
	// TokenAPIs is translate.TokenAPIs: the token APIs a worker serves
	// (zero: all).
	TokenAPIs = translate.TokenAPIs
)

// The token APIs (translate's).
const (
	TokenGenerate    = translate.TokenGenerate
	TokenInference   = translate.TokenInference
	TokenCompletions = translate.TokenCompletions
)

// TokenAPISet returns the set of the given token APIs.
func TokenAPISet(as ...TokenAPI) TokenAPIs { return translate.TokenAPISet(as...) }
