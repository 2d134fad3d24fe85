// Package apiwire holds the JSON and server-sent-event shapes of the four
// front-door APIs an agent harness speaks, on both sides of the wire:
//
//   - OpenAI chat completions (POST /v1/chat/completions): ChatRequest with
//     ChatMessage (content a string or parts, tool calls, tool role
//     messages), ChatTool, tool_choice (see ToolChoice), stream_options,
//     max_tokens / max_completion_tokens, stop, and vLLM's
//     add_generation_prompt and continue_final_message; ChatResponse,
//     ChatChunk (with ChatDelta and ToolCallDelta) and Usage with
//     prompt_tokens_details.cached_tokens.
//   - OpenAI completions (POST /v1/completions): CompletionRequest (Prompt:
//     a string, strings, token ids or token arrays) and CompletionResponse,
//     which is also the stream chunk.
//   - OpenAI Responses (POST /v1/responses): ResponsesRequest (instructions,
//     input as a string or InputItem values: messages with input_text /
//     output_text parts, function_call, custom_tool_call and their output
//     items), Response with OutputItem values and ResponsesUsage
//     (input_tokens_details.cached_tokens), and ResponsesStreamEvent for
//     response.created ... response.completed with sequence_number.
//   - Anthropic Messages (POST /v1/messages, /v1/messages/count_tokens):
//     MessagesRequest (system as a string or blocks, AnthropicMessage with
//     ContentBlock values text / tool_use / tool_result, tools,
//     stop_sequences, metadata.user_id), MessagesResponse with stop_reason
//     and AnthropicUsage (input_tokens excludes cache_read_input_tokens),
//     MessagesStreamEvent for message_start ... message_stop, ping and
//     error, and CountTokensResponse.
//   - Model lists in both shapes (ModelList, AnthropicModelList) and error
//     bodies (OpenAIError {"error":{message,type,param,code}},
//     AnthropicError {"type":"error","error":{type,message}}).
//
// # Fields that are a string or an array
//
// Several fields come either as a JSON string or as an array: TextOr[P]
// decodes both and re-encodes the form it was given (Parts non-nil means
// the array form). Prompt does the same for completions' four prompt
// forms. Helpers return the plain text of each (ChatMessage.Text,
// InputItem.Text, BlocksText).
//
// # Exact shapes
//
// The reply types are written the way the services write them: fields
// that are null on the wire are pointers without omitempty
// (finish_reason in chunks, content of a tool-call-only message,
// stop_reason in message_start), and the event and block types whose
// fields depend on their "type" (MessagesStreamEvent, ContentBlock,
// ResponsesStreamEvent, OutputItem) have a MarshalJSON that writes
// exactly that type's fields. The package's tests drive the official
// Go SDKs (openai-go, anthropic-sdk-go) against these shapes, request
// side and reply side, streaming and not.
//
// Request types keep the fields they do not interpret as json.RawMessage,
// so a decoded request re-encodes without losing them; unknown fields are
// dropped.
//
// # Streams
//
// SSEWriter writes events to an http.ResponseWriter and flushes each one:
// Data for OpenAI's chunks, Done for its `data: [DONE]` terminator, Event
// for the named events of Anthropic and Responses. SSEReader parses an
// upstream stream with a bound on the line length (ErrSSELineTooLong).
//
// # Thread safety
//
// The wire types are plain values. SSEWriter and SSEReader are not safe
// for concurrent use.
package apiwire
