package translate

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTokenRequestTranslation: requests in each token API, written in
// each other: ids exact, sampling parameters renamed, logprobs asked.
func TestTokenRequestTranslation(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to TokenAPI
		in, want string
	}{
		{"sglang→vllm", TokenGenerate, TokenInference,
			`{"rid":"r1","input_ids":[1,2,3],"sampling_params":{"max_new_tokens":8,"temperature":0.7,"stop_token_ids":[2]},"return_logprob":true,"stream":true}`,
			`{"request_id":"r1","token_ids":[1,2,3],"sampling_params":{"max_tokens":8,"temperature":0.7,"stop_token_ids":[2],"logprobs":0},"stream":true,"stream_options":{"include_usage":true}}`},
		{"sglang→vllm top", TokenGenerate, TokenInference,
			`{"input_ids":[7],"sampling_params":{"min_new_tokens":2},"return_logprob":true,"top_logprobs_num":3}`,
			`{"token_ids":[7],"sampling_params":{"min_tokens":2,"logprobs":3}}`},
		{"sglang→vllm no logprobs", TokenGenerate, TokenInference,
			`{"input_ids":[7,8],"sampling_params":{"max_new_tokens":1}}`,
			`{"token_ids":[7,8],"sampling_params":{"max_tokens":1}}`},
		{"vllm→sglang", TokenInference, TokenGenerate,
			`{"model":"m","request_id":"q","token_ids":[4,5],"sampling_params":{"max_tokens":4,"logprobs":0,"top_k":5},"cache_salt":"s"}`,
			`{"rid":"q","input_ids":[4,5],"sampling_params":{"max_new_tokens":4,"top_k":5},"return_logprob":true}`},
		{"vllm→sglang top", TokenInference, TokenGenerate,
			`{"token_ids":[4],"sampling_params":{"logprobs":2},"stream":true}`,
			`{"input_ids":[4],"sampling_params":{},"return_logprob":true,"top_logprobs_num":2,"stream":true}`},
		{"sglang→completions", TokenGenerate, TokenCompletions,
			`{"input_ids":[9,10],"sampling_params":{"max_new_tokens":3,"ignore_eos":true}}`,
			`{"prompt":[9,10],"max_tokens":3,"ignore_eos":true,"return_tokens_as_token_ids":true,"logprobs":0}`},
		{"vllm→completions", TokenInference, TokenCompletions,
			`{"model":"m","token_ids":[9],"sampling_params":{"max_tokens":3,"logprobs":1},"stream":true,"cache_salt":"t"}`,
			`{"model":"m","prompt":[9],"max_tokens":3,"return_tokens_as_token_ids":true,"logprobs":1,"stream":true,"stream_options":{"include_usage":true},"cache_salt":"t"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var probe struct {
				A json.RawMessage `json:"input_ids"`
				B json.RawMessage `json:"token_ids"`
			}
			require.NoError(t, json.Unmarshal([]byte(tc.in), &probe))
			var ids []uint32
			raw := probe.A
			if raw == nil {
				raw = probe.B
			}
			require.NoError(t, json.Unmarshal(raw, &ids))
			tr, err := ReadTokenRequest(tc.from, []byte(tc.in), ids)
			require.NoError(t, err)
			out, err := EncodeTokenRequest(tc.to, tr)
			require.NoError(t, err)
			require.JSONEq(t, tc.want, string(out))
		})
	}
	_, err := ReadTokenRequest(TokenGenerate, []byte(`{"text":"hi"}`), nil)
	require.ErrorIs(t, err, ErrBadRequest)
	_, err = ReadTokenRequest(TokenInference, []byte(`{"token_ids":[1],"sampling_params":{"logprobs":-1}}`), []uint32{1})
	require.ErrorIs(t, err, ErrBadRequest)
	_, err = ReadTokenRequest(TokenGenerate, []byte(`{"input_ids":[1],"sampling_params":[1]}`), []uint32{1})
	require.ErrorIs(t, err, ErrBadRequest)
}

// TestTokenReplyRoundTrip: a worker's reply bytes in one token API, the
// client's bytes out in another, whole and streamed, with ids, logprobs,
// top logprobs, finish reasons (abort included) and usage carried.
func TestTokenReplyRoundTrip(t *testing.T) {
	sglReq := &TokenRequest{RID: "r", Tokens: []uint32{1, 2, 3}, Logprobs: true}
	sglTop := &TokenRequest{RID: "r", Tokens: []uint32{1, 2, 3}, Logprobs: true, TopLogprobs: 2}
	vReq := &TokenRequest{RID: "v", Tokens: []uint32{1, 2, 3}, Logprobs: true, IncludeUsage: true}
	vPlain := &TokenRequest{RID: "v", Tokens: []uint32{1, 2, 3}}
	for _, tc := range []struct {
		name    string
		worker  TokenAPI
		client  TokenAPI
		req     *TokenRequest
		replies []string // the worker's objects (one: a whole reply)
		want    []string // the client's objects
	}{
		{"vllm→sglang whole", TokenInference, TokenGenerate, sglReq,
			[]string{`{"request_id":"r","choices":[{"index":0,"token_ids":[11,12],"logprobs":{"content":[{"token":"token_id:11","logprob":-0.5,"top_logprobs":[]},{"token":"token_id:12","logprob":-1.25,"top_logprobs":[]}]},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":0}}}`},
			[]string{`{"text":"","output_ids":[11,12],"meta_info":{"id":"r","finish_reason":{"type":"length","length":2},"prompt_tokens":3,"completion_tokens":2,"cached_tokens":0,"e2e_latency":0,"output_token_logprobs":[[-0.5,11,null],[-1.25,12,null]]}}`}},
		{"vllm→sglang abort", TokenInference, TokenGenerate, sglReq,
			[]string{`{"choices":[{"token_ids":[11],"logprobs":{"content":[{"token":"token_id:11","logprob":-0.5}]},"finish_reason":"abort"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":16}}}`},
			[]string{`{"text":"","output_ids":[11],"meta_info":{"id":"r","finish_reason":{"type":"abort","message":"Abort by request"},"prompt_tokens":3,"completion_tokens":1,"cached_tokens":16,"e2e_latency":0,"output_token_logprobs":[[-0.5,11,null]]}}`}},
		{"vllm→sglang top", TokenInference, TokenGenerate, sglTop,
			[]string{`{"choices":[{"token_ids":[11],"logprobs":{"content":[{"token":"token_id:11","logprob":-0.5,"top_logprobs":[{"token":"token_id:11","logprob":-0.5},{"token":"token_id:7","logprob":-1.5}]}]},"finish_reason":"stop"}]}`},
			[]string{`{"text":"","output_ids":[11],"meta_info":{"id":"r","finish_reason":{"type":"stop"},"prompt_tokens":3,"completion_tokens":1,"cached_tokens":0,"e2e_latency":0,"output_token_logprobs":[[-0.5,11,null]],"output_top_logprobs":[[[-0.5,11,null],[-1.5,7,null]]]}}`}},
		{"vllm→sglang stream", TokenInference, TokenGenerate, sglReq,
			[]string{`{"choices":[{"token_ids":[11],"logprobs":{"content":[{"token":"token_id:11","logprob":-0.5}]},"finish_reason":null}]}`,
				`{"choices":[{"token_ids":[12],"logprobs":{"content":[{"token":"token_id:12","logprob":-0.75}]},"finish_reason":null}]}`,
				`{"choices":[{"token_ids":[],"logprobs":{"content":[]},"finish_reason":"stop"}]}`,
				`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":0}}}`},
			[]string{`{"text":"","output_ids":[11],"meta_info":{"id":"r","finish_reason":null,"prompt_tokens":3,"completion_tokens":1,"cached_tokens":0,"e2e_latency":0,"output_token_logprobs":[[-0.5,11,null]]}}`,
				`{"text":"","output_ids":[11,12],"meta_info":{"id":"r","finish_reason":null,"prompt_tokens":3,"completion_tokens":2,"cached_tokens":0,"e2e_latency":0,"output_token_logprobs":[[-0.5,11,null],[-0.75,12,null]]}}`,
				`{"text":"","output_ids":[11,12],"meta_info":{"id":"r","finish_reason":{"type":"stop"},"prompt_tokens":3,"completion_tokens":2,"cached_tokens":0,"e2e_latency":0,"output_token_logprobs":[[-0.5,11,null],[-0.75,12,null]]}}`}},
		{"sglang→vllm whole", TokenGenerate, TokenInference, vReq,
			[]string{`{"text":" a b","output_ids":[11,12],"meta_info":{"id":"v","finish_reason":{"type":"stop","matched":12},"prompt_tokens":3,"completion_tokens":2,"cached_tokens":2,"output_token_logprobs":[[-0.5,11,null],[-0.125,12,null]]}}`},
			[]string{`{"request_id":"v","choices":[{"index":0,"logprobs":{"content":[{"token":"token_id:11","logprob":-0.5,"bytes":null,"top_logprobs":[]},{"token":"token_id:12","logprob":-0.125,"bytes":null,"top_logprobs":[]}]},"finish_reason":"stop","token_ids":[11,12]}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":2}},"prompt_logprobs":null}`}},
		{"sglang→vllm stream cumulative", TokenGenerate, TokenInference, vReq,
			[]string{`{"text":" a","output_ids":[11],"meta_info":{"finish_reason":null,"output_token_logprobs":[[-0.5,11,null]]}}`,
				`{"text":" a b","output_ids":[11,12],"meta_info":{"finish_reason":null,"output_token_logprobs":[[-0.5,11,null],[-0.125,12,null]]}}`,
				`{"text":" a b","output_ids":[11,12],"meta_info":{"finish_reason":{"type":"abort"},"prompt_tokens":3,"completion_tokens":2,"cached_tokens":0,"output_token_logprobs":[[-0.5,11,null],[-0.125,12,null]]}}`},
			[]string{`{"request_id":"v","choices":[{"index":0,"logprobs":{"content":[{"token":"token_id:11","logprob":-0.5,"bytes":null,"top_logprobs":[]}]},"finish_reason":null,"token_ids":[11]}],"prompt_logprobs":null}`,
				`{"request_id":"v","choices":[{"index":0,"logprobs":{"content":[{"token":"token_id:12","logprob":-0.125,"bytes":null,"top_logprobs":[]}]},"finish_reason":null,"token_ids":[12]}],"prompt_logprobs":null}`,
				`{"request_id":"v","choices":[{"index":0,"logprobs":{"content":[]},"finish_reason":"abort","token_ids":[]}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"prompt_tokens_details":{"cached_tokens":0}},"prompt_logprobs":null}`}},
		{"sglang→vllm no logprobs", TokenGenerate, TokenInference, vPlain,
			[]string{`{"text":"x","output_ids":[5],"meta_info":{"finish_reason":{"type":"length","length":1},"prompt_tokens":3,"completion_tokens":1,"cached_tokens":0}}`},
			[]string{`{"request_id":"v","choices":[{"index":0,"logprobs":null,"finish_reason":"length","token_ids":[5]}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4,"prompt_tokens_details":{"cached_tokens":0}},"prompt_logprobs":null}`}},
		{"completions→sglang whole", TokenCompletions, TokenGenerate, sglTop,
			[]string{`{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":" a b","logprobs":{"text_offset":[0,2],"token_logprobs":[-0.5,-2],"tokens":["token_id:11","token_id:12"],"top_logprobs":[{"token_id:11":-0.5,"token_id:3":-1.5},{"token_id:12":-2,"token_id:3":-3}]},"finish_reason":"length"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":0}}}`},
			[]string{`{"text":" a b","output_ids":[11,12],"meta_info":{"id":"r","finish_reason":{"type":"length","length":2},"prompt_tokens":3,"completion_tokens":2,"cached_tokens":0,"e2e_latency":0,"output_token_logprobs":[[-0.5,11,null],[-2,12,null]],"output_top_logprobs":[[[-0.5,11,null],[-1.5,3,null]],[[-2,12,null],[-3,3,null]]]}}`}},
		{"completions→vllm stream", TokenCompletions, TokenInference, vReq,
			[]string{`{"choices":[{"index":0,"text":" a","logprobs":{"text_offset":[0],"token_logprobs":[-0.5],"tokens":["token_id:11"],"top_logprobs":[{"token_id:11":-0.5}]},"finish_reason":null}]}`,
				`{"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"length"}]}`,
				`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":0}}}`},
			[]string{`{"request_id":"v","choices":[{"index":0,"logprobs":{"content":[{"token":"token_id:11","logprob":-0.5,"bytes":null,"top_logprobs":[]}]},"finish_reason":null,"token_ids":[11]}],"prompt_logprobs":null}`,
				`{"request_id":"v","choices":[{"index":0,"logprobs":{"content":[]},"finish_reason":"length","token_ids":[]}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4,"prompt_tokens_details":{"cached_tokens":0}},"prompt_logprobs":null}`}},
		{"completions→sglang abort", TokenCompletions, TokenGenerate, sglReq,
			[]string{`{"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"abort"}],"usage":{"prompt_tokens":3,"completion_tokens":0}}`},
			[]string{`{"text":"","output_ids":[],"meta_info":{"id":"r","finish_reason":{"type":"abort","message":"Abort by request"},"prompt_tokens":3,"completion_tokens":0,"cached_tokens":0,"e2e_latency":0,"output_token_logprobs":[]}}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dec := &TokenDecoder{API: tc.worker}
			enc := &TokenEncoder{API: tc.client, Req: tc.req}
			var got []string
			stream := len(tc.replies) > 1
			sent := 0
			for _, r := range tc.replies {
				c, err := dec.Decode([]byte(r))
				require.NoError(t, err, r)
				enc.Add(c)
				if stream && !enc.Finished() && enc.Len() > sent {
					got = append(got, string(enc.Chunk(sent)))
					sent = enc.Len()
				}
			}
			if stream {
				got = append(got, string(enc.Chunk(sent)))
			} else {
				got = append(got, string(enc.Whole()))
			}
			require.Len(t, got, len(tc.want), "%q", got)
			for i := range got {
				require.JSONEq(t, tc.want[i], got[i], "object %d", i)
			}
		})
	}
}

// TestTokenReplyErrors: replies that do not hold what they must are
// errors (ErrTokenReply), never a panic or a silent re-tokenization.
func TestTokenReplyErrors(t *testing.T) {
	for _, tc := range []struct {
		api TokenAPI
		in  string
	}{
		{TokenGenerate, `{"error":{"message":"x"}}`},
		{TokenGenerate, `{"output_ids":[1,2],"meta_info":{"output_token_logprobs":[[-1,1,null]]}}`},
		{TokenGenerate, `{"output_ids":[1],"meta_info":{"output_token_logprobs":[[-1,2,null]]}}`},
		{TokenGenerate, `{"output_ids":[1],"meta_info":{"output_token_logprobs":[[-1]]}}`},
		{TokenInference, `{"choices":[{"token_ids":[1],"logprobs":{"content":[]}}]}`},
		{TokenInference, `{"choices":[{"token_ids":[1],"logprobs":{"content":[{"logprob":-1,"top_logprobs":[{"token":"x"}]}]}}]}`},
		{TokenInference, `{}`},
		{TokenCompletions, `{"choices":[{"text":"a","logprobs":null}]}`},
		{TokenCompletions, `{"choices":[{"text":"a","logprobs":{"tokens":["a"],"token_logprobs":[-1]}}]}`},
		{TokenCompletions, `{"choices":[{"text":"a","logprobs":{"tokens":["token_id:1"],"token_logprobs":[null]}}]}`},
		{TokenCompletions, `{"choices":[{"text":"a","logprobs":{"tokens":["token_id:1"],"token_logprobs":[-1],"top_logprobs":[[1]]}}]}`},
		{TokenCompletions, `{"choices":[{"text":"a","logprobs":{"tokens":["token_id:99999999999"],"token_logprobs":[-1]}}]}`},
	} {
		_, err := (&TokenDecoder{API: tc.api}).Decode([]byte(tc.in))
		require.ErrorIs(t, err, ErrTokenReply, tc.in)
	}
	require.Equal(t, "x", TokenErrorMessage([]byte(`{"error":{"message":"x"}}`)))
	require.Equal(t, "y", TokenErrorMessage([]byte(`{"error":"y"}`)))
	require.Equal(t, "z", TokenErrorMessage([]byte(`{"message":"z"}`)))
	require.Equal(t, "plain", TokenErrorMessage([]byte(" plain ")))
}

func fuzzDecode(t *testing.T, api TokenAPI, b []byte) {
	d := &TokenDecoder{API: api}
	c, err := d.Decode(b)
	if err != nil {
		require.True(t, errors.Is(err, ErrTokenReply))
		return
	}
	if c.Logprobs != nil {
		require.Len(t, c.Logprobs, len(c.IDs))
	}
	for _, client := range []TokenAPI{TokenGenerate, TokenInference} {
		enc := &TokenEncoder{API: client, Req: &TokenRequest{Logprobs: true, TopLogprobs: 2}}
		enc.Add(c)
		require.True(t, json.Valid(enc.Whole()))
		require.True(t, json.Valid(enc.Chunk(0)))
	}
}

// FuzzTokenCompletions: the completions reply decoder never panics, and
// what it accepts translates to valid JSON with one logprob per id.
func FuzzTokenCompletions(f *testing.F) {
	f.Add([]byte(`{"choices":[{"text":" a","logprobs":{"tokens":["token_id:11"],"token_logprobs":[-0.5],"top_logprobs":[{"token_id:11":-0.5,"token_id:2":-1}]},"finish_reason":"length"}],"usage":{"prompt_tokens":3}}`))
	f.Add([]byte(`{"choices":[],"usage":{"prompt_tokens":1,"prompt_tokens_details":{"cached_tokens":1}}}`))
	f.Add([]byte(`{"choices":[{"text":"","logprobs":null,"finish_reason":"abort"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) { fuzzDecode(t, TokenCompletions, b) })
}

// FuzzTokenReply: SGLang's and vLLM's reply decoders never panic.
func FuzzTokenReply(f *testing.F) {
	f.Add(byte(1), []byte(`{"text":"a","output_ids":[1,2],"meta_info":{"finish_reason":{"type":"stop","matched":2},"output_token_logprobs":[[-1,1,null],[-2,2,"x"]],"output_top_logprobs":[[[-1,1,null]],[[-2,2,null]]]}}`))
	f.Add(byte(2), []byte(`{"choices":[{"token_ids":[1],"logprobs":{"content":[{"token":"token_id:1","logprob":-1,"top_logprobs":[{"token":"token_id:1","logprob":-1}]}]},"finish_reason":"abort"}]}`))
	f.Add(byte(2), []byte(`{"choices":[],"usage":{"prompt_tokens":1}}`))
	f.Fuzz(func(t *testing.T, which byte, b []byte) {
		api := TokenGenerate
		if which%2 == 0 {
			api = TokenInference
		}
		fuzzDecode(t, api, b)
	})
}
