package mock

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTokenAPIsConfig: Config.TokenAPIs serves only the token APIs named.
func TestTokenAPIsConfig(t *testing.T) {
	s, err := Start(Config{Speedup: 1000, TokenAPIs: []TokenAPI{TokenInference}})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	code, _ := post(t, s.URL()+"/generate", `{"input_ids":[1,2,3]}`)
	require.Equal(t, http.StatusNotFound, code)
	code, b := post(t, s.URL()+"/inference/v1/generate", `{"token_ids":[1,2,3],"sampling_params":{"max_tokens":2}}`)
	require.Equal(t, http.StatusOK, code, string(b))
}

// TestTokenCompletions: /v1/completions with a token-id prompt and
// return_tokens_as_token_ids gives the ids and logprobs /generate gives
// for the same prompt, as "token_id:N" tokens.
func TestTokenCompletions(t *testing.T) {
	s, err := Start(Config{Speedup: 1000, Aliases: []string{"*"}})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	code, b := post(t, s.URL()+"/generate", `{"input_ids":[5,6,7,8],"sampling_params":{"max_new_tokens":6,"ignore_eos":true},"return_logprob":true}`)
	require.Equal(t, http.StatusOK, code, string(b))
	var g struct {
		OutputIDs []uint32 `json:"output_ids"`
		Meta      struct {
			LPs [][3]any `json:"output_token_logprobs"`
		} `json:"meta_info"`
	}
	require.NoError(t, json.Unmarshal(b, &g))
	code, b = post(t, s.URL()+"/v1/completions", `{"model":"m","prompt":[5,6,7,8],"max_tokens":6,"ignore_eos":true,"logprobs":2,"return_tokens_as_token_ids":true}`)
	require.Equal(t, http.StatusOK, code, string(b))
	var c struct {
		Choices []struct {
			Logprobs struct {
				Tokens []string             `json:"tokens"`
				LPs    []float64            `json:"token_logprobs"`
				Top    []map[string]float64 `json:"top_logprobs"`
			} `json:"logprobs"`
			Finish string `json:"finish_reason"`
		} `json:"choices"`
	}
	require.NoError(t, json.Unmarshal(b, &c), string(b))
	lp := c.Choices[0].Logprobs
	require.Len(t, lp.Tokens, 6)
	for i, id := range g.OutputIDs {
		require.Equal(t, "token_id:"+json.Number(itoa(id)).String(), lp.Tokens[i])
		require.Equal(t, g.Meta.LPs[i][0], lp.LPs[i])
		require.Len(t, lp.Top[i], 2)
	}
	require.Equal(t, "length", c.Choices[0].Finish)
}

func itoa(v uint32) string { b, _ := json.Marshal(v); return string(b) }
