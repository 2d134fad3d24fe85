package translate

import (
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

// Anthropic reports whether the API is Anthropic's (its errors take
// Anthropic's shape).
func (a API) Anthropic() bool { return a == Messages || a == CountTokens }

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
