// Package hftok tokenizes prompts exactly as a vLLM engine serving a
// Hugging Face model does, in process, so a router needs no /tokenize
// round trip per request.
//
// # Tokenizer
//
// Load (or Parse) reads a model's tokenizer.json: a BPE model with
// byte-level pre-tokenization (Qwen 2/2.5/3, Llama 3.x, DeepSeek V3/R1,
// GPT-2 and their kin), NFC normalization with the Unicode 9.0 tables
// Hugging Face tokenizers uses, Split pre-tokenizers (the usual patterns
// by hand-written matchers, any other through regexp2 with Oniguruma's
// semantics), Digits, and added tokens with their lstrip, rstrip,
// single_word and normalized flags. Anything else is an error, and the
// caller keeps asking the engine. Encode gives what tokenizers'
// encode(text, add_special_tokens=False) gives; words and whole segments
// between added tokens are cached (bounded), so a conversation resent
// with one more turn costs little more than the new turn.
//
// # Chat
//
// Chat turns an OpenAI chat completions body into the prompt's token
// ids, the way vLLM builds them:
//
//  1. the messages are converted as vLLM's chat_utils converts them
//     (text parts joined, tool-call arguments parsed from their JSON text,
//     empty tool_calls dropped, reasoning, names; media parts are
//     ErrUnsupported);
//  2. tools are laid out as vLLM's model_dump of its tool type lays them
//     out (ChatConfig.ToolStrict for versions with a strict field);
//  3. the model's chat template (chat_template.jinja, or
//     tokenizer_config.json's chat_template) is rendered with Hugging
//     Face's Jinja settings (trim_blocks, lstrip_blocks, Python-style
//     tojson), the request's chat_template_kwargs, add_generation_prompt
//     and continue_final_message, and the special tokens;
//  4. the text is encoded without added special tokens.
//
// TokenizeChatSession does the same for one turn of an agent session,
// from what the session's previous turn left: the body is parsed reusing
// every message and field whose bytes are unchanged, those messages'
// conversions are reused, the template's loop replays the iterations
// whose message and reads are unchanged (internal/jinja's loop memo), and
// only the text past the shared rendered prefix is encoded, its ids
// appended in place to the previous turn's; the ids equal TokenizeChat's.
//
// Chat satisfies gateway.Tokenizer: `agentkv proxy --tokenizer DIR`
// loads one with LoadChat; without the flag the proxy finds DIR itself
// with CachedModelDir (the worker's model in the Hugging Face hub cache,
// HubCacheDir). The gateway checks its answers against the
// worker's own /tokenize in the background and stops using it for a
// worker on the first mismatch, so a template or version drift costs a
// round trip per request, never a wrong routing key for long.
//
// # How it is checked
//
// The tokenizer is compared with Hugging Face's Rust tokenizers (its Node
// binding) on thousands of generated texts for Qwen3, Llama 3 and
// DeepSeek V3, and the chat rendering with Python's jinja2 in
// transformers' environment fed vLLM's conversion, on the same models'
// templates and the test templates in testdata/chat (.ci/tokenizer-ref.sh;
// the test templates alone in go test when python3 has jinja2); there,
// session renders from the previous turn's memos are also compared with
// whole renders.
//
// # Concurrency
//
// Tokenizer and Chat are safe for concurrent use; their caches have
// their own locks.
package hftok
