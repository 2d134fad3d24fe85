// Package translate is the gateway's API translation, as pure functions
// over bytes: the front-door APIs (API, the OpenAI chat completions,
// completions and Responses APIs and Anthropic's Messages), their requests
// translated to chat completions (ResponsesToChat, MessagesToChat), chat
// completion replies translated back (ChatToResponses, ChatToMessages;
// streamed: NewResponsesStream, NewMessagesStream writing through an
// EventWriter), the usage a reply reports in any of the APIs (Sniffer,
// over the bytes passed through, and Learn for a chat chunk), the
// server-sent event scanner they share (SSEScanner), and Claude Code's
// billing preamble (StripBilling).
//
// An agent resends its whole context every turn: Memos keeps what decoding
// recent Messages and Responses bodies left (MessagesToChatMemo,
// ResponsesToChatMemo) and the chat JSON of their translations
// (MarshalChat), so a next turn decodes and encodes its new items only;
// the results equal the memo-less functions'.
//
// Nothing here does I/O beyond writing a stream to an http.ResponseWriter,
// and nothing needs a gateway: every function is tested as bytes in, bytes
// out. The functions are safe for concurrent use; the stream, writer,
// scanner and sniffer types are used by one request at a time.
//
// Usage is in the chat completions vocabulary whatever the API: prompt
// tokens include cached ones (Anthropic's input_tokens +
// cache_read_input_tokens + cache_creation_input_tokens), finish reasons
// are chat's (stop, length, tool_calls).
package translate
