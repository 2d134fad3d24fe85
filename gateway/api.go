package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
)

// API names one of the front-door APIs the gateway serves.
type API uint8

// The APIs, by request path.
const (
	// Chat is OpenAI POST /v1/chat/completions.
	Chat API = iota + 1
	// Completions is OpenAI POST /v1/completions.
	Completions
	// Responses is OpenAI POST /v1/responses.
	Responses
	// Messages is Anthropic POST /v1/messages.
	Messages
	// CountTokens is Anthropic POST /v1/messages/count_tokens.
	CountTokens
)

// Request paths.
const (
	ChatPath        = "/v1/chat/completions"
	CompletionsPath = "/v1/completions"
	ResponsesPath   = "/v1/responses"
	MessagesPath    = "/v1/messages"
	CountTokensPath = "/v1/messages/count_tokens"
	ModelsPath      = "/v1/models"
	TokenizePath    = "/tokenize"
)

var apiNames = [...]string{"", "chat", "completions", "responses", "messages", "count_tokens"}
var apiPaths = [...]string{"", ChatPath, CompletionsPath, ResponsesPath, MessagesPath, CountTokensPath}

// String returns the API's short name: chat, completions, responses,
// messages or count_tokens (the names traces and metrics use).
func (a API) String() string {
	if int(a) < len(apiNames) && a != 0 {
		return apiNames[a]
	}
	return "unknown"
}

// Path returns the API's request path.
func (a API) Path() string {
	if int(a) < len(apiPaths) {
		return apiPaths[a]
	}
	return ""
}

// ParseAPI returns the API named s (as String writes it).
func ParseAPI(s string) (API, bool) {
	for i, n := range apiNames {
		if i > 0 && n == s {
			return API(i), true
		}
	}
	return 0, false
}

// anthropic reports whether errors of this API take Anthropic's shape.
func (a API) anthropic() bool { return a == Messages || a == CountTokens }

// APIs is a set of APIs.
type APIs uint8

// Set returns s with a added.
func (s APIs) Set(a API) APIs { return s | 1<<a }

// Has reports whether a is in s.
func (s APIs) Has(a API) bool { return s&(1<<a) != 0 }

// APISet returns the set of the given APIs.
func APISet(as ...API) APIs {
	var s APIs
	for _, a := range as {
		s = s.Set(a)
	}
	return s
}

// String lists the set's APIs, comma-separated.
func (s APIs) String() string {
	var b []string
	for a := Chat; a <= CountTokens; a++ {
		if s.Has(a) {
			b = append(b, a.String())
		}
	}
	return strings.Join(b, ",")
}

// ParseAPIs parses a comma-separated list of API names; "all" is every
// API, "" or "chat" alone the OpenAI-compatible baseline.
func ParseAPIs(s string) (APIs, bool) {
	var set APIs
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch f {
		case "":
			continue
		case "all":
			set = APISet(Chat, Completions, Responses, Messages, CountTokens)
			continue
		}
		a, ok := ParseAPI(f)
		if !ok {
			return 0, false
		}
		set = set.Set(a)
	}
	return set, true
}

// Baseline is what every OpenAI-compatible engine serves: chat and text
// completions. Workers whose Native set is zero get it.
var Baseline = APISet(Chat, Completions)

// Error types of the two API families, by HTTP status.
func openAIErrorType(code int) string {
	switch {
	case code == http.StatusUnauthorized:
		return "authentication_error"
	case code == http.StatusNotFound:
		return "not_found_error"
	case code == http.StatusTooManyRequests:
		return "rate_limit_error"
	case code == http.StatusServiceUnavailable:
		return "service_unavailable"
	case code >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

func anthropicErrorType(code int) string {
	switch code {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	}
	if code >= 500 {
		return "api_error"
	}
	return "invalid_request_error"
}

// ErrorBody returns the JSON error body of the API's family for an HTTP
// status: OpenAI's {"error":{"message","type","param","code"}} or
// Anthropic's {"type":"error","error":{"type","message"}}.
func ErrorBody(anthropic bool, code int, msg string) []byte {
	var v any
	if anthropic {
		v = struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}{Type: "error", Error: struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		}{anthropicErrorType(code), msg}}
	} else {
		v = struct {
			Error struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Param   *string `json:"param"`
				Code    int     `json:"code"`
			} `json:"error"`
		}{Error: struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Param   *string `json:"param"`
			Code    int     `json:"code"`
		}{Message: msg, Type: openAIErrorType(code), Code: code}}
	}
	b, _ := json.Marshal(v)
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
