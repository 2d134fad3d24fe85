package apiwire

import (
	"encoding/json"
)

// ResponsesRequest is the body of POST /v1/responses (OpenAI's Responses
// API, as Codex sends it). Instructions is a string (or, from some
// clients, text parts).
type ResponsesRequest struct {
	Model              string                   `json:"model"`
	Instructions       TextOr[ResponsesContent] `json:"instructions,omitzero"`
	Input              TextOr[InputItem]        `json:"input,omitzero"`
	Tools              []ResponsesTool          `json:"tools,omitempty"`
	ToolChoice         json.RawMessage          `json:"tool_choice,omitempty"`
	ParallelToolCalls  *bool                    `json:"parallel_tool_calls,omitempty"`
	Stream             bool                     `json:"stream,omitempty"`
	MaxOutputTokens    *int                     `json:"max_output_tokens,omitempty"`
	Temperature        *float64                 `json:"temperature,omitempty"`
	TopP               *float64                 `json:"top_p,omitempty"`
	Store              *bool                    `json:"store,omitempty"`
	PreviousResponseID string                   `json:"previous_response_id,omitempty"`
	Reasoning          json.RawMessage          `json:"reasoning,omitempty"`
	Text               json.RawMessage          `json:"text,omitempty"`
	Include            []string                 `json:"include,omitempty"`
	PromptCacheKey     string                   `json:"prompt_cache_key,omitempty"`
	Metadata           json.RawMessage          `json:"metadata,omitempty"`
	User               string                   `json:"user,omitempty"`
	Truncation         string                   `json:"truncation,omitempty"`
	ServiceTier        string                   `json:"service_tier,omitempty"`
	CacheSalt          string                   `json:"cache_salt,omitempty"` // as ChatRequest.CacheSalt
}

// InstructionsText returns the instructions' text (text parts joined
// with "\n").
func (r *ResponsesRequest) InstructionsText() string { return responsesText(r.Instructions) }

// ReasoningEffort returns reasoning.effort ("" when absent); an error when
// reasoning is not an object.
func (r *ResponsesRequest) ReasoningEffort() (string, error) {
	var v struct {
		Effort string `json:"effort"`
	}
	if len(r.Reasoning) == 0 {
		return "", nil
	}
	err := json.Unmarshal(r.Reasoning, &v)
	return v.Effort, err
}

// Types of Responses input and output items.
const (
	ItemMessage              = "message"
	ItemFunctionCall         = "function_call"
	ItemFunctionCallOutput   = "function_call_output"
	ItemCustomToolCall       = "custom_tool_call"
	ItemCustomToolCallOutput = "custom_tool_call_output"
	ItemReasoning            = "reasoning"
)

// Types of Responses content parts.
const (
	PartInputText  = "input_text"
	PartOutputText = "output_text"
	PartRefusal    = "refusal"
	PartInputImage = "input_image"
)

// InputItem is one item of a Responses input: a message ({"role", "content"},
// with or without "type":"message"; content a string or input_text /
// output_text parts), a function_call (call_id, name, arguments), a
// custom_tool_call (call_id, name, input), or a function_call_output or
// custom_tool_call_output (call_id, output). Other item types (reasoning,
// ...) decode with their Type set and their payload dropped, except
// reasoning's summary and encrypted content, kept raw.
type InputItem struct {
	Type    string                   `json:"type,omitempty"`
	ID      string                   `json:"id,omitempty"`
	Role    string                   `json:"role,omitempty"`
	Content TextOr[ResponsesContent] `json:"content,omitzero"`
	Status  string                   `json:"status,omitempty"`

	CallID    string `json:"call_id,omitempty"`
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
	// Input of a custom_tool_call: the free-form text the model wrote.
	Input string `json:"input,omitempty"`
	// Output of a function_call_output: a string, or (newer clients) an
	// array of content parts.
	Output TextOr[ResponsesContent] `json:"output,omitzero"`

	Summary          json.RawMessage `json:"summary,omitempty"`
	EncryptedContent string          `json:"encrypted_content,omitempty"`
}

// ItemType returns the item's type; a message may omit "type".
func (it *InputItem) ItemType() string {
	if it.Type == "" && it.Role != "" {
		return ItemMessage
	}
	return it.Type
}

// Text returns a message item's text (its string content, or its text
// parts joined with "\n"), or a function_call_output's output text.
func (it *InputItem) Text() string {
	if it.ItemType() == ItemFunctionCallOutput {
		return responsesText(it.Output)
	}
	return responsesText(it.Content)
}

func responsesText(c TextOr[ResponsesContent]) string {
	if c.Parts == nil {
		return c.Text
	}
	s, n := "", 0
	for _, p := range c.Parts {
		if p.Type == PartInputText || p.Type == PartOutputText || p.Type == "text" {
			if n > 0 {
				s += "\n"
			}
			s += p.Text
			n++
		}
	}
	return s
}

// ResponsesContent is a content part of a Responses message, input or
// output: input_text, output_text (with annotations and logprobs, arrays
// that are never null on the wire), refusal, input_image.
type ResponsesContent struct {
	Type        string          `json:"type"`
	Text        string          `json:"text"`
	Annotations json.RawMessage `json:"annotations,omitempty"`
	Logprobs    json.RawMessage `json:"logprobs,omitempty"`
	Refusal     string          `json:"refusal,omitempty"`
	ImageURL    string          `json:"image_url,omitempty"`
	Detail      string          `json:"detail,omitempty"`
}

// OutputText returns an output_text part with empty annotations and
// logprobs, as OpenAI writes it.
func OutputText(text string) ResponsesContent {
	return ResponsesContent{Type: PartOutputText, Text: text,
		Annotations: json.RawMessage("[]"), Logprobs: json.RawMessage("[]")}
}

// ResponsesTool is a tool of a Responses request. Function tools are flat
// ({"type":"function","name","description","parameters","strict"}), not
// nested as in chat completions; built-in tools (web_search, ...) decode
// with only Type set.
type ResponsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// Response statuses.
const (
	StatusInProgress = "in_progress"
	StatusCompleted  = "completed"
	StatusIncomplete = "incomplete"
	StatusFailed     = "failed"
)

// Response is a Responses API response object: the reply of a
// non-streamed request and the payload of response.created,
// response.in_progress, response.completed and response.failed.
type Response struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"` // "response"
	CreatedAt          int64              `json:"created_at"`
	Status             string             `json:"status"`
	Model              string             `json:"model"`
	Output             []OutputItem       `json:"output"`
	Usage              *ResponsesUsage    `json:"usage"`
	Error              *ResponseError     `json:"error"`
	IncompleteDetails  *IncompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	MaxOutputTokens    *int               `json:"max_output_tokens"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Temperature        *float64           `json:"temperature"`
	TopP               *float64           `json:"top_p"`
	ToolChoice         json.RawMessage    `json:"tool_choice"`
	Tools              []ResponsesTool    `json:"tools"`
	Truncation         string             `json:"truncation,omitempty"`
	Metadata           json.RawMessage    `json:"metadata,omitempty"`
}

// ResponseError is a failed response's error.
type ResponseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// IncompleteDetails says why a response is incomplete
// ("max_output_tokens").
type IncompleteDetails struct {
	Reason string `json:"reason"`
}

// OutputItem is one output item of a response: a message (role
// "assistant", output_text parts), a function_call or a custom_tool_call
// (its Input).
type OutputItem struct {
	Type    string             `json:"type"`
	ID      string             `json:"id"`
	Status  string             `json:"status,omitempty"`
	Role    string             `json:"role,omitempty"`
	Content []ResponsesContent `json:"content,omitempty"`

	CallID    string `json:"call_id,omitempty"`
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
	Input     string `json:"input,omitempty"`

	Summary json.RawMessage `json:"summary,omitempty"`
}

// MarshalJSON writes each item type with exactly its own fields (a message
// always has content, a function call always has arguments, a custom tool
// call always has input).
func (o OutputItem) MarshalJSON() ([]byte, error) {
	switch o.Type {
	case ItemFunctionCall:
		return json.Marshal(struct {
			Type      string `json:"type"`
			ID        string `json:"id"`
			CallID    string `json:"call_id"`
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
			Status    string `json:"status"`
		}{o.Type, o.ID, o.CallID, o.Name, o.Arguments, o.Status})
	case ItemCustomToolCall:
		return json.Marshal(struct {
			Type   string `json:"type"`
			ID     string `json:"id"`
			Status string `json:"status"`
			CallID string `json:"call_id"`
			Name   string `json:"name"`
			Input  string `json:"input"`
		}{o.Type, o.ID, o.Status, o.CallID, o.Name, o.Input})
	case ItemMessage:
		c := o.Content
		if c == nil {
			c = []ResponsesContent{}
		}
		return json.Marshal(struct {
			Type    string             `json:"type"`
			ID      string             `json:"id"`
			Status  string             `json:"status"`
			Role    string             `json:"role"`
			Content []ResponsesContent `json:"content"`
		}{o.Type, o.ID, o.Status, o.Role, c})
	}
	type plain OutputItem
	return json.Marshal(plain(o))
}

// ResponsesUsage is a response's usage: input tokens (cached ones in
// InputTokensDetails.CachedTokens, included in InputTokens) and output
// tokens.
type ResponsesUsage struct {
	InputTokens         int                 `json:"input_tokens"`
	InputTokensDetails  InputTokensDetails  `json:"input_tokens_details"`
	OutputTokens        int                 `json:"output_tokens"`
	OutputTokensDetails OutputTokensDetails `json:"output_tokens_details"`
	TotalTokens         int                 `json:"total_tokens"`
}

// InputTokensDetails breaks down a response's input tokens.
type InputTokensDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// OutputTokensDetails breaks down a response's output tokens.
type OutputTokensDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// Responses stream event types.
const (
	EventResponseCreated            = "response.created"
	EventResponseInProgress         = "response.in_progress"
	EventResponseCompleted          = "response.completed"
	EventResponseFailed             = "response.failed"
	EventResponseIncomplete         = "response.incomplete"
	EventOutputItemAdded            = "response.output_item.added"
	EventOutputItemDone             = "response.output_item.done"
	EventContentPartAdded           = "response.content_part.added"
	EventContentPartDone            = "response.content_part.done"
	EventOutputTextDelta            = "response.output_text.delta"
	EventOutputTextDone             = "response.output_text.done"
	EventFunctionCallArgumentsDelta = "response.function_call_arguments.delta"
	EventFunctionCallArgumentsDone  = "response.function_call_arguments.done"
	EventCustomToolCallInputDelta   = "response.custom_tool_call_input.delta"
	EventCustomToolCallInputDone    = "response.custom_tool_call_input.done"
	EventResponsesError             = "error"
)

// ResponsesStreamEvent is one event of a streamed response. Written as
// `event: TYPE` + `data: JSON`; MarshalJSON writes exactly the fields
// of its Type (response events: response; item events: output_index and
// item; part events: item_id, output_index, content_index, part; text
// deltas: item_id, output_index, content_index, delta, logprobs; text
// done: ... text, logprobs; argument deltas: item_id, output_index,
// delta; arguments done: item_id, output_index, name, arguments; custom
// tool call input delta: item_id, output_index, delta; input done:
// item_id, output_index, input; error: code, message, param), each with
// sequence_number. Decoding fills what is present.
type ResponsesStreamEvent struct {
	Type           string            `json:"type"`
	SequenceNumber int               `json:"sequence_number"`
	Response       *Response         `json:"response,omitempty"`
	OutputIndex    int               `json:"output_index"`
	ContentIndex   int               `json:"content_index"`
	ItemID         string            `json:"item_id,omitempty"`
	Item           *OutputItem       `json:"item,omitempty"`
	Part           *ResponsesContent `json:"part,omitempty"`
	Delta          string            `json:"delta,omitempty"`
	Text           string            `json:"text,omitempty"`
	Name           string            `json:"name,omitempty"`
	Arguments      string            `json:"arguments,omitempty"`
	Input          string            `json:"input,omitempty"`
	Code           string            `json:"code,omitempty"`
	Message        string            `json:"message,omitempty"`
	Param          *string           `json:"param,omitempty"`
}

var emptyArray = json.RawMessage("[]")

// MarshalJSON implements json.Marshaler (see the type's doc).
func (e ResponsesStreamEvent) MarshalJSON() ([]byte, error) {
	switch e.Type {
	case EventResponseCreated, EventResponseInProgress, EventResponseCompleted,
		EventResponseFailed, EventResponseIncomplete:
		return json.Marshal(struct {
			Type     string    `json:"type"`
			Seq      int       `json:"sequence_number"`
			Response *Response `json:"response"`
		}{e.Type, e.SequenceNumber, e.Response})
	case EventOutputItemAdded, EventOutputItemDone:
		return json.Marshal(struct {
			Type        string      `json:"type"`
			Seq         int         `json:"sequence_number"`
			OutputIndex int         `json:"output_index"`
			Item        *OutputItem `json:"item"`
		}{e.Type, e.SequenceNumber, e.OutputIndex, e.Item})
	case EventContentPartAdded, EventContentPartDone:
		return json.Marshal(struct {
			Type         string            `json:"type"`
			Seq          int               `json:"sequence_number"`
			ItemID       string            `json:"item_id"`
			OutputIndex  int               `json:"output_index"`
			ContentIndex int               `json:"content_index"`
			Part         *ResponsesContent `json:"part"`
		}{e.Type, e.SequenceNumber, e.ItemID, e.OutputIndex, e.ContentIndex, e.Part})
	case EventOutputTextDelta:
		return json.Marshal(struct {
			Type         string          `json:"type"`
			Seq          int             `json:"sequence_number"`
			ItemID       string          `json:"item_id"`
			OutputIndex  int             `json:"output_index"`
			ContentIndex int             `json:"content_index"`
			Delta        string          `json:"delta"`
			Logprobs     json.RawMessage `json:"logprobs"`
		}{e.Type, e.SequenceNumber, e.ItemID, e.OutputIndex, e.ContentIndex, e.Delta, emptyArray})
	case EventOutputTextDone:
		return json.Marshal(struct {
			Type         string          `json:"type"`
			Seq          int             `json:"sequence_number"`
			ItemID       string          `json:"item_id"`
			OutputIndex  int             `json:"output_index"`
			ContentIndex int             `json:"content_index"`
			Text         string          `json:"text"`
			Logprobs     json.RawMessage `json:"logprobs"`
		}{e.Type, e.SequenceNumber, e.ItemID, e.OutputIndex, e.ContentIndex, e.Text, emptyArray})
	case EventFunctionCallArgumentsDelta, EventCustomToolCallInputDelta:
		return json.Marshal(struct {
			Type        string `json:"type"`
			Seq         int    `json:"sequence_number"`
			ItemID      string `json:"item_id"`
			OutputIndex int    `json:"output_index"`
			Delta       string `json:"delta"`
		}{e.Type, e.SequenceNumber, e.ItemID, e.OutputIndex, e.Delta})
	case EventFunctionCallArgumentsDone:
		return json.Marshal(struct {
			Type        string `json:"type"`
			Seq         int    `json:"sequence_number"`
			ItemID      string `json:"item_id"`
			OutputIndex int    `json:"output_index"`
			Name        string `json:"name,omitempty"`
			Arguments   string `json:"arguments"`
		}{e.Type, e.SequenceNumber, e.ItemID, e.OutputIndex, e.Name, e.Arguments})
	case EventCustomToolCallInputDone:
		return json.Marshal(struct {
			Type        string `json:"type"`
			Seq         int    `json:"sequence_number"`
			ItemID      string `json:"item_id"`
			OutputIndex int    `json:"output_index"`
			Input       string `json:"input"`
		}{e.Type, e.SequenceNumber, e.ItemID, e.OutputIndex, e.Input})
	case EventResponsesError:
		return json.Marshal(struct {
			Type    string  `json:"type"`
			Seq     int     `json:"sequence_number"`
			Code    *string `json:"code"`
			Message string  `json:"message"`
			Param   *string `json:"param"`
		}{e.Type, e.SequenceNumber, nilIfEmpty(e.Code), e.Message, e.Param})
	}
	type plain ResponsesStreamEvent
	return json.Marshal(plain(e))
}

func nilIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
