package apiwire

import "encoding/json"

// Object names of OpenAI's replies.
const (
	ObjectChatCompletion      = "chat.completion"
	ObjectChatCompletionChunk = "chat.completion.chunk"
	ObjectTextCompletion      = "text_completion"
	ObjectList                = "list"
	ObjectModel               = "model"
	ObjectResponse            = "response"
)

// OpenAI finish reasons (chat completions and completions).
const (
	FinishStop      = "stop"
	FinishLength    = "length"
	FinishToolCalls = "tool_calls"
)

// ChatRequest is the body of POST /v1/chat/completions, as OpenAI clients
// (and vLLM's extensions) send it. Fields the gateway and the mock do not
// interpret are kept as raw JSON so that a decoded request re-encodes
// without losing them.
type ChatRequest struct {
	Model               string          `json:"model"`
	Messages            []ChatMessage   `json:"messages"`
	Stream              bool            `json:"stream,omitempty"`
	StreamOptions       *StreamOptions  `json:"stream_options,omitempty"`
	MaxTokens           *int            `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int            `json:"max_completion_tokens,omitempty"`
	Stop                TextOr[string]  `json:"stop,omitzero"`
	Tools               []ChatTool      `json:"tools,omitempty"`
	ToolChoice          json.RawMessage `json:"tool_choice,omitempty"` // "none" | "auto" | "required" | {"type":"function","function":{"name":...}}
	ParallelToolCalls   *bool           `json:"parallel_tool_calls,omitempty"`
	Temperature         *float64        `json:"temperature,omitempty"`
	TopP                *float64        `json:"top_p,omitempty"`
	N                   *int            `json:"n,omitempty"`
	Seed                *int64          `json:"seed,omitempty"`
	User                string          `json:"user,omitempty"`
	ResponseFormat      json.RawMessage `json:"response_format,omitempty"`
	ReasoningEffort     string          `json:"reasoning_effort,omitempty"`
	PromptCacheKey      string          `json:"prompt_cache_key,omitempty"`
	Metadata            json.RawMessage `json:"metadata,omitempty"`
	Logprobs            *bool           `json:"logprobs,omitempty"`
	TopLogprobs         *int            `json:"top_logprobs,omitempty"`

	// vLLM extensions. AddGenerationPrompt defaults to true when absent;
	// ContinueFinalMessage (with AddGenerationPrompt false) continues the
	// last (assistant) message instead of starting a new one.
	TopK                 *int            `json:"top_k,omitempty"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt,omitempty"`
	ContinueFinalMessage bool            `json:"continue_final_message,omitempty"`
	MinTokens            *int            `json:"min_tokens,omitempty"`
	IgnoreEOS            bool            `json:"ignore_eos,omitempty"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs,omitempty"`
	// CacheSalt is vLLM's cache_salt: the engine mixes it into the
	// prompt's first block hash, isolating its prefix cache (a tenant's).
	CacheSalt string `json:"cache_salt,omitempty"`
}

// MaxOutputTokens returns max_completion_tokens, else max_tokens, else 0
// (no limit given).
func (r *ChatRequest) MaxOutputTokens() int {
	if r.MaxCompletionTokens != nil {
		return *r.MaxCompletionTokens
	}
	if r.MaxTokens != nil {
		return *r.MaxTokens
	}
	return 0
}

// IncludeUsage reports whether a stream must end with a usage chunk.
func (r *ChatRequest) IncludeUsage() bool {
	return r.StreamOptions != nil && r.StreamOptions.IncludeUsage
}

// GenerationPrompt reports add_generation_prompt (true when absent).
func (r *ChatRequest) GenerationPrompt() bool {
	return r.AddGenerationPrompt == nil || *r.AddGenerationPrompt
}

// StreamOptions is a chat or completions request's stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage,omitempty"`
}

// ChatMessage is one request message: role system, developer, user,
// assistant or tool. Content is a string or an array of parts; assistant
// messages may carry tool calls and no content; tool messages name the
// call they answer.
type ChatMessage struct {
	Role       string                  `json:"role"`
	Content    TextOr[ChatContentPart] `json:"content,omitzero"`
	Name       string                  `json:"name,omitempty"`
	ToolCalls  []ToolCall              `json:"tool_calls,omitempty"`
	ToolCallID string                  `json:"tool_call_id,omitempty"`
	// ReasoningContent is vLLM's (and DeepSeek's) reasoning field.
	ReasoningContent string `json:"reasoning_content,omitempty"`
}

// Text returns the message's text: the string content, or its text parts
// joined with "\n" (other parts are skipped).
func (m *ChatMessage) Text() string { return chatPartsText(m.Content) }

func chatPartsText(c TextOr[ChatContentPart]) string {
	if c.Parts == nil {
		return c.Text
	}
	s := ""
	n := 0
	for _, p := range c.Parts {
		if p.Type == "text" || p.Type == "input_text" || p.Type == "output_text" {
			if n > 0 {
				s += "\n"
			}
			s += p.Text
			n++
		}
	}
	return s
}

// ChatContentPart is one part of a message's array content: {"type":"text",
// "text":...}, {"type":"image_url","image_url":{...}}, {"type":
// "input_audio",...}, {"type":"file",...}. Non-text payloads are kept raw.
type ChatContentPart struct {
	Type       string          `json:"type"`
	Text       string          `json:"text,omitempty"`
	ImageURL   json.RawMessage `json:"image_url,omitempty"`
	InputAudio json.RawMessage `json:"input_audio,omitempty"`
	File       json.RawMessage `json:"file,omitempty"`
}

// ImageURLPart returns an image_url part: {"type":"image_url","image_url":
// {"url":url}} (url may be a data: URL).
func ImageURLPart(url string) ChatContentPart {
	u, _ := json.Marshal(struct {
		URL string `json:"url"`
	}{url})
	return ChatContentPart{Type: "image_url", ImageURL: u}
}

// ChatTool is one entry of a chat request's tools.
type ChatTool struct {
	Type     string       `json:"type"` // "function"
	Function FunctionDecl `json:"function"`
}

// FunctionDecl declares a function tool; Parameters is its JSON schema.
type FunctionDecl struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// ToolCall is a tool call of an assistant message (request or reply).
// An empty ID (or function name) is left out.
type ToolCall struct {
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type"` // "function"
	Function FunctionCall `json:"function"`
}

// FunctionCall is a called function: its name and its arguments as a JSON
// text (a string holding JSON, as OpenAI sends it).
type FunctionCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// ToolChoice decodes a chat request's tool_choice: Mode is "none", "auto",
// "required" (or "" when absent), or "function" with Name set for a named
// function. A malformed value reads as "auto".
func ToolChoice(raw json.RawMessage) (mode, name string) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, ""
	}
	var o struct {
		Type     string `json:"type"`
		Name     string `json:"name"` // Responses' shape
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &o) != nil {
		return "auto", ""
	}
	if o.Function.Name != "" {
		return "function", o.Function.Name
	}
	if o.Name != "" {
		return "function", o.Name
	}
	if o.Type == "any" || o.Type == "tool" || o.Type == "auto" || o.Type == "none" {
		return o.Type, ""
	}
	return "auto", ""
}

// ChatResponse is a non-streamed chat completion.
type ChatResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"` // "chat.completion"
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []ChatChoice `json:"choices"`
	Usage             *Usage       `json:"usage,omitempty"`
	SystemFingerprint *string      `json:"system_fingerprint,omitempty"`
	ServiceTier       *string      `json:"service_tier,omitempty"`
}

// ChatChoice is one choice of a chat completion.
type ChatChoice struct {
	Index        int                 `json:"index"`
	Message      ChatResponseMessage `json:"message"`
	Logprobs     json.RawMessage     `json:"logprobs"` // null unless asked for
	FinishReason string              `json:"finish_reason"`
	// StopReason is vLLM's: the stop string or token that ended the
	// choice, else null.
	StopReason json.RawMessage `json:"stop_reason,omitempty"`
}

// StopString returns vLLM's stop_reason when it is a string (the stop
// string that ended the choice); false when it is null, absent or a token
// id.
func (c *ChatChoice) StopString() (string, bool) {
	var s string
	if len(c.StopReason) == 0 || c.StopReason[0] != '"' || json.Unmarshal(c.StopReason, &s) != nil {
		return "", false
	}
	return s, true
}

// ChatResponseMessage is the assistant message of a choice; Content is null
// when the reply is only tool calls.
type ChatResponseMessage struct {
	Role             string     `json:"role"`
	Content          *string    `json:"content"`
	Refusal          *string    `json:"refusal"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
	ReasoningContent *string    `json:"reasoning_content,omitempty"`
}

// ChatChunk is one event of a streamed chat completion. Every chunk but
// the usage chunk has one choice; the usage chunk (stream_options.
// include_usage) has none.
type ChatChunk struct {
	ID                string            `json:"id"`
	Object            string            `json:"object"` // "chat.completion.chunk"
	Created           int64             `json:"created"`
	Model             string            `json:"model"`
	Choices           []ChatChunkChoice `json:"choices"`
	Usage             *Usage            `json:"usage,omitempty"`
	SystemFingerprint *string           `json:"system_fingerprint,omitempty"`
}

// ChatChunkChoice is a chunk's choice; FinishReason is null until the last.
type ChatChunkChoice struct {
	Index        int             `json:"index"`
	Delta        ChatDelta       `json:"delta"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
	StopReason   json.RawMessage `json:"stop_reason,omitempty"`
}

// ChatDelta is what a chunk adds to the message.
type ChatDelta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCallDelta `json:"tool_calls,omitempty"`
}

// ToolCallDelta is a streamed piece of a tool call: the first piece of
// call Index carries ID, Type and Function.Name; later pieces append to
// Function.Arguments.
type ToolCallDelta struct {
	Index    int               `json:"index"`
	ID       string            `json:"id,omitempty"`
	Type     string            `json:"type,omitempty"`
	Function FunctionCallDelta `json:"function"`
}

// FunctionCallDelta is the function part of a ToolCallDelta.
type FunctionCallDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// Usage is the token usage of a chat completion or completion.
// PromptTokensDetails.CachedTokens counts prompt tokens served from the
// prefix cache.
type Usage struct {
	PromptTokens            int                      `json:"prompt_tokens"`
	CompletionTokens        int                      `json:"completion_tokens"`
	TotalTokens             int                      `json:"total_tokens"`
	PromptTokensDetails     *PromptTokensDetails     `json:"prompt_tokens_details,omitempty"`
	CompletionTokensDetails *CompletionTokensDetails `json:"completion_tokens_details,omitempty"`
}

// PromptTokensDetails breaks down prompt tokens.
type PromptTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
	AudioTokens  int `json:"audio_tokens,omitempty"`
}

// CompletionTokensDetails breaks down completion tokens.
type CompletionTokensDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// CachedTokens returns the cached prompt tokens (0 when not reported).
func (u *Usage) CachedTokens() int {
	if u == nil || u.PromptTokensDetails == nil {
		return 0
	}
	return u.PromptTokensDetails.CachedTokens
}

// CompletionRequest is the body of POST /v1/completions.
type CompletionRequest struct {
	Model         string          `json:"model"`
	Prompt        Prompt          `json:"prompt"`
	Stream        bool            `json:"stream,omitempty"`
	StreamOptions *StreamOptions  `json:"stream_options,omitempty"`
	MaxTokens     *int            `json:"max_tokens,omitempty"`
	Stop          TextOr[string]  `json:"stop,omitzero"`
	Temperature   *float64        `json:"temperature,omitempty"`
	TopP          *float64        `json:"top_p,omitempty"`
	N             *int            `json:"n,omitempty"`
	Seed          *int64          `json:"seed,omitempty"`
	Echo          bool            `json:"echo,omitempty"`
	Suffix        string          `json:"suffix,omitempty"`
	User          string          `json:"user,omitempty"`
	Logprobs      *int            `json:"logprobs,omitempty"`
	CacheSalt     string          `json:"cache_salt,omitempty"` // as ChatRequest.CacheSalt
	MinTokens     *int            `json:"min_tokens,omitempty"`
	IgnoreEOS     bool            `json:"ignore_eos,omitempty"`
	Metadata      json.RawMessage `json:"metadata,omitempty"`
}

// IncludeUsage reports whether a stream must end with a usage chunk.
func (r *CompletionRequest) IncludeUsage() bool {
	return r.StreamOptions != nil && r.StreamOptions.IncludeUsage
}

// CompletionResponse is a completion, and (with Object
// "text_completion" too) each chunk of a streamed one.
type CompletionResponse struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"` // "text_completion"
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	Choices           []CompletionChoice `json:"choices"`
	Usage             *Usage             `json:"usage,omitempty"`
	SystemFingerprint *string            `json:"system_fingerprint,omitempty"`
}

// CompletionChoice is one choice; in a stream FinishReason is null until
// the last chunk.
type CompletionChoice struct {
	Index        int             `json:"index"`
	Text         string          `json:"text"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
	StopReason   json.RawMessage `json:"stop_reason,omitempty"`
}

// ModelList is GET /v1/models in OpenAI's (and vLLM's) shape.
type ModelList struct {
	Object string  `json:"object"` // "list"
	Data   []Model `json:"data"`
}

// Model is one served model. Root and MaxModelLen are vLLM's additions.
type Model struct {
	ID          string  `json:"id"`
	Object      string  `json:"object"` // "model"
	Created     int64   `json:"created"`
	OwnedBy     string  `json:"owned_by"`
	Root        string  `json:"root,omitempty"`
	Parent      *string `json:"parent,omitempty"`
	MaxModelLen int     `json:"max_model_len,omitempty"`
}
