// Package wordtok is a deterministic word-level tokenizer and chat
// template, the tokenizer of the mock vLLM worker (engine/mock) and of any
// process that must reproduce its token ids in-process (the gateway routing
// to mock workers).
//
// # The tokenizer
//
// Text is split at Unicode white space, exactly as strings.Fields splits
// it; each word becomes one token whose id is WordID(word) =
// FirstWordID + XXH3-64(word) mod (2^31 − FirstWordID). White space is not
// a token and is not kept: Decode joins words with single spaces. So a
// prompt of N space-separated words is N tokens, as the prompts that
// `agentkv replay` synthesizes assume, and equal words give equal ids in
// every process with no shared state.
//
// Decode knows the special tokens, the 64 words the mock generates
// (Words), and every word this Tokenizer has encoded (up to
// Config.MaxLearned); other ids decode as "<unk:ID>".
//
// # The chat template
//
// RenderChat turns chat messages (system, user, assistant with tool calls,
// tool results) and tool declarations into text with one special marker
// per role; ApplyChat is its tokens. With AddGenerationPrompt the prompt
// ends with <|assistant|>; with ContinueFinalMessage the last message is
// left open so generation continues it (vLLM's continue_final_message,
// which failover uses to resume a cut stream). FromChat, FromResponses and
// FromMessages convert the requests of the three APIs (package apiwire)
// to the template's messages, so the same conversation sent through any
// API gives the same tokens:
//
//	<|system|> You are a coding agent. <|end|>
//	<|user|> list the files <|end|>
//	<|assistant|> <|tool_call|> Glob {"pattern":"*"} <|end|>
//	<|tool|> a.go b.go <|end|>
//	<|assistant|>
//
// # Thread safety
//
// A Tokenizer is safe for concurrent use; the functions are pure.
package wordtok
