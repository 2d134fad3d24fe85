package apiwire

import "encoding/json"

// Anthropic content block types.
const (
	BlockText       = "text"
	BlockToolUse    = "tool_use"
	BlockToolResult = "tool_result"
	BlockThinking   = "thinking"
	BlockImage      = "image"
)

// Anthropic stop reasons.
const (
	StopEndTurn      = "end_turn"
	StopMaxTokens    = "max_tokens"
	StopToolUse      = "tool_use"
	StopStopSequence = "stop_sequence"
)

// MessagesRequest is the body of POST /v1/messages (Anthropic's Messages
// API, as Claude Code sends it) and, without MaxTokens, of POST
// /v1/messages/count_tokens. MaxTokens is nil when absent.
type MessagesRequest struct {
	Model         string               `json:"model"`
	System        TextOr[ContentBlock] `json:"system,omitzero"`
	Messages      []AnthropicMessage   `json:"messages"`
	MaxTokens     *int                 `json:"max_tokens,omitempty"`
	StopSequences []string             `json:"stop_sequences,omitempty"`
	Stream        bool                 `json:"stream,omitempty"`
	Tools         []AnthropicTool      `json:"tools,omitempty"`
	ToolChoice    json.RawMessage      `json:"tool_choice,omitempty"` // an AnthropicToolChoice
	Metadata      *AnthropicMetadata   `json:"metadata,omitempty"`
	Temperature   *float64             `json:"temperature,omitempty"`
	TopP          *float64             `json:"top_p,omitempty"`
	TopK          *int                 `json:"top_k,omitempty"`
	Thinking      json.RawMessage      `json:"thinking,omitempty"`
	ServiceTier   string               `json:"service_tier,omitempty"`
	CacheSalt     string               `json:"cache_salt,omitempty"` // as ChatRequest.CacheSalt (an agentkv and vLLM extension)
}

// SystemText returns the system prompt's text (text blocks joined with
// "\n").
func (r *MessagesRequest) SystemText() string { return BlocksText(r.System) }

// AnthropicToolChoice is a Messages request's tool_choice: Type "auto",
// "any", "tool" (with Name) or "none".
type AnthropicToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use,omitempty"`
}

// AnthropicMetadata is a request's metadata. Claude Code puts a JSON
// string holding its session id in UserID.
type AnthropicMetadata struct {
	UserID string `json:"user_id,omitempty"`
}

// AnthropicMessage is one message of a Messages request: role user or
// assistant, content a string or an array of blocks.
type AnthropicMessage struct {
	Role    string               `json:"role"`
	Content TextOr[ContentBlock] `json:"content"`
}

// BlocksText returns the text of c: the string, or its text blocks joined
// with "\n".
func BlocksText(c TextOr[ContentBlock]) string {
	if c.Parts == nil {
		return c.Text
	}
	s, n := "", 0
	for _, b := range c.Parts {
		if b.Type == BlockText {
			if n > 0 {
				s += "\n"
			}
			s += b.Text
			n++
		}
	}
	return s
}

// ContentBlock is a block of Anthropic content: text {text}, tool_use
// {id, name, input}, tool_result {tool_use_id, content (a string or
// blocks), is_error}, thinking {thinking, signature}, image {source (see
// ImageSource)}. Content is kept raw: server tool results
// (web_search_tool_result, ...) may hold an object there.
// MarshalJSON writes exactly the fields of Type (a text block always has
// text, a tool_use block always has input); CacheControl, when set, is
// kept.
type ContentBlock struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`

	ID    string          `json:"id,omitempty"`
	Name  string          `json:"name,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`

	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`

	Thinking  string `json:"thinking,omitempty"`
	Signature string `json:"signature,omitempty"`

	Source       json.RawMessage `json:"source,omitempty"`
	CacheControl json.RawMessage `json:"cache_control,omitempty"`
	Citations    json.RawMessage `json:"citations,omitempty"`
}

// ResultText returns a tool_result block's text ("" when its content is
// neither a string nor blocks).
func (b *ContentBlock) ResultText() string {
	var c TextOr[ContentBlock]
	if json.Unmarshal(b.Content, &c) != nil {
		return ""
	}
	return BlocksText(c)
}

// ImageSource is an image block's source: {"type":"base64","media_type",
// "data"} or {"type":"url","url"}.
type ImageSource struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
}

var emptyObject = json.RawMessage("{}")

// MarshalJSON implements json.Marshaler (see the type's doc).
func (b ContentBlock) MarshalJSON() ([]byte, error) {
	switch b.Type {
	case BlockText:
		return json.Marshal(struct {
			Type         string          `json:"type"`
			Text         string          `json:"text"`
			Citations    json.RawMessage `json:"citations,omitempty"`
			CacheControl json.RawMessage `json:"cache_control,omitempty"`
		}{b.Type, b.Text, b.Citations, b.CacheControl})
	case BlockToolUse:
		in := b.Input
		if len(in) == 0 {
			in = emptyObject
		}
		return json.Marshal(struct {
			Type         string          `json:"type"`
			ID           string          `json:"id"`
			Name         string          `json:"name"`
			Input        json.RawMessage `json:"input"`
			CacheControl json.RawMessage `json:"cache_control,omitempty"`
		}{b.Type, b.ID, b.Name, in, b.CacheControl})
	case BlockThinking:
		return json.Marshal(struct {
			Type      string `json:"type"`
			Thinking  string `json:"thinking"`
			Signature string `json:"signature"`
		}{b.Type, b.Thinking, b.Signature})
	}
	type plain ContentBlock
	return json.Marshal(plain(b))
}

// AnthropicTool is a tool of a Messages request; InputSchema is its JSON
// schema. Server tools (web_search, ...) carry a Type.
type AnthropicTool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema,omitempty"`
	Type         string          `json:"type,omitempty"`
	CacheControl json.RawMessage `json:"cache_control,omitempty"`
}

// MessagesResponse is a Messages reply, and the message of a stream's
// message_start event (with empty content and a null stop_reason).
type MessagesResponse struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"` // "message"
	Role         string         `json:"role"` // "assistant"
	Model        string         `json:"model"`
	Content      []ContentBlock `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        AnthropicUsage `json:"usage"`
}

// AnthropicUsage is a Messages reply's usage. Unlike OpenAI's,
// InputTokens excludes the cached tokens: the prompt is InputTokens +
// CacheReadInputTokens + CacheCreationInputTokens.
type AnthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
	OutputTokens             int `json:"output_tokens"`
}

// MessageDeltaUsage is a usage object as read from a stream, whose counts
// may be absent (nil): a message_delta's usage holds output_tokens and,
// in newer API versions, the input counts.
type MessageDeltaUsage struct {
	InputTokens              *int `json:"input_tokens"`
	CacheCreationInputTokens *int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int `json:"cache_read_input_tokens"`
	OutputTokens             *int `json:"output_tokens"`
}

// Messages stream event types.
const (
	EventMessageStart      = "message_start"
	EventContentBlockStart = "content_block_start"
	EventContentBlockDelta = "content_block_delta"
	EventContentBlockStop  = "content_block_stop"
	EventMessageDelta      = "message_delta"
	EventMessageStop       = "message_stop"
	EventPing              = "ping"
	EventError             = "error"
)

// Content block delta types.
const (
	DeltaText      = "text_delta"
	DeltaInputJSON = "input_json_delta"
	DeltaThinking  = "thinking_delta"
	DeltaSignature = "signature_delta"
)

// MessagesStreamEvent is one event of a streamed Messages reply, written as
// `event: TYPE` + `data: JSON`. MarshalJSON writes exactly the fields of
// its Type: message_start {message}; content_block_start {index,
// content_block}; content_block_delta {index, delta: {type, text |
// partial_json | thinking | signature}}; content_block_stop {index};
// message_delta {delta: {stop_reason, stop_sequence}, usage}; message_stop
// and ping {}; error {error}. Decoding fills what is present (Delta from
// either delta shape).
type MessagesStreamEvent struct {
	Type         string                `json:"type"`
	Message      *MessagesResponse     `json:"message,omitempty"`
	Index        int                   `json:"index"`
	ContentBlock *ContentBlock         `json:"content_block,omitempty"`
	Delta        *StreamDelta          `json:"delta,omitempty"`
	Usage        *AnthropicUsage       `json:"usage,omitempty"`
	Error        *AnthropicErrorDetail `json:"error,omitempty"`
}

// StreamDelta is the delta of a content_block_delta (Type and one payload
// field) or of a message_delta (StopReason, StopSequence).
type StreamDelta struct {
	Type         string  `json:"type,omitempty"`
	Text         string  `json:"text,omitempty"`
	PartialJSON  string  `json:"partial_json,omitempty"`
	Thinking     string  `json:"thinking,omitempty"`
	Signature    string  `json:"signature,omitempty"`
	StopReason   *string `json:"stop_reason,omitempty"`
	StopSequence *string `json:"stop_sequence,omitempty"`
}

// MarshalJSON implements json.Marshaler (see the type's doc).
func (e MessagesStreamEvent) MarshalJSON() ([]byte, error) {
	type kv = struct {
		Type string `json:"type"`
	}
	switch e.Type {
	case EventMessageStart:
		return json.Marshal(struct {
			Type    string            `json:"type"`
			Message *MessagesResponse `json:"message"`
		}{e.Type, e.Message})
	case EventContentBlockStart:
		return json.Marshal(struct {
			Type         string        `json:"type"`
			Index        int           `json:"index"`
			ContentBlock *ContentBlock `json:"content_block"`
		}{e.Type, e.Index, e.ContentBlock})
	case EventContentBlockDelta:
		var d any = kv{}
		if e.Delta != nil {
			switch e.Delta.Type {
			case DeltaText:
				d = struct {
					Type string `json:"type"`
					Text string `json:"text"`
				}{e.Delta.Type, e.Delta.Text}
			case DeltaInputJSON:
				d = struct {
					Type        string `json:"type"`
					PartialJSON string `json:"partial_json"`
				}{e.Delta.Type, e.Delta.PartialJSON}
			case DeltaThinking:
				d = struct {
					Type     string `json:"type"`
					Thinking string `json:"thinking"`
				}{e.Delta.Type, e.Delta.Thinking}
			case DeltaSignature:
				d = struct {
					Type      string `json:"type"`
					Signature string `json:"signature"`
				}{e.Delta.Type, e.Delta.Signature}
			default:
				d = e.Delta
			}
		}
		return json.Marshal(struct {
			Type  string `json:"type"`
			Index int    `json:"index"`
			Delta any    `json:"delta"`
		}{e.Type, e.Index, d})
	case EventContentBlockStop:
		return json.Marshal(struct {
			Type  string `json:"type"`
			Index int    `json:"index"`
		}{e.Type, e.Index})
	case EventMessageDelta:
		var d struct {
			StopReason   *string `json:"stop_reason"`
			StopSequence *string `json:"stop_sequence"`
		}
		if e.Delta != nil {
			d.StopReason, d.StopSequence = e.Delta.StopReason, e.Delta.StopSequence
		}
		u := e.Usage
		if u == nil {
			u = &AnthropicUsage{}
		}
		return json.Marshal(struct {
			Type  string          `json:"type"`
			Delta any             `json:"delta"`
			Usage *AnthropicUsage `json:"usage"`
		}{e.Type, d, u})
	case EventMessageStop, EventPing:
		return json.Marshal(kv{e.Type})
	case EventError:
		return json.Marshal(struct {
			Type  string                `json:"type"`
			Error *AnthropicErrorDetail `json:"error"`
		}{e.Type, e.Error})
	}
	type plain MessagesStreamEvent
	return json.Marshal(plain(e))
}

// CountTokensResponse is the reply of POST /v1/messages/count_tokens.
type CountTokensResponse struct {
	InputTokens int `json:"input_tokens"`
}

// AnthropicModelList is GET /v1/models in Anthropic's shape (what clients
// sending anthropic-version expect).
type AnthropicModelList struct {
	Data    []AnthropicModel `json:"data"`
	HasMore bool             `json:"has_more"`
	FirstID *string          `json:"first_id"`
	LastID  *string          `json:"last_id"`
}

// AnthropicModel is one model of an AnthropicModelList; CreatedAt is
// RFC 3339.
type AnthropicModel struct {
	Type        string `json:"type"` // "model"
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"`
}
