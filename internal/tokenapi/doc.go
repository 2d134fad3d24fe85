// Package tokenapi holds the wire shapes of the token-in, token-out APIs
// RL rollout frameworks send to their engines and routers, shared by the
// mock worker (engine/mock) and the gateway:
//
//   - SGLang's native POST /generate (slime, ROLL, AReaL): GenerateRequest
//     with rid, input_ids or text, sampling_params, return_logprob,
//     logprob_start_len, top_logprobs_num, stream; the answer's meta_info
//     with output_token_logprobs as [logprob, token_id, text] triples and
//     finish_reason {"type": "stop"|"length"|"abort"}. Errors are
//     {"error": {"message": ...}} (WriteSGLangError).
//   - vLLM's POST /inference/v1/generate (SkyRL): InferenceRequest with
//     token_ids, sampling_params (max_tokens, logprobs, ...), cache_salt;
//     the answer's choices carry token_ids, finish_reason and OpenAI-style
//     logprobs.content. Errors are OpenAI's {"error": {...}}.
//   - SGLang's POST /abort_request ({"rid"} or {"abort_all": true}).
//
// ParseIDs decodes a JSON array of token ids with the checks every
// receiver needs before it allocates or hashes anything: integers only,
// none negative, none at or beyond the vocabulary, and at most a bound
// (MaxIDs by default: a request of 10 million ids is refused after
// MaxIDs of them, without building a slice of 10 million).
package tokenapi
