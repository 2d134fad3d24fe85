package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

type genReply struct {
	OutputIDs []uint32 `json:"output_ids"`
	MetaInfo  struct {
		FinishReason *struct {
			Type string `json:"type"`
		} `json:"finish_reason"`
		PromptTokens        int      `json:"prompt_tokens"`
		CompletionTokens    int      `json:"completion_tokens"`
		CachedTokens        int      `json:"cached_tokens"`
		OutputTokenLogprobs [][3]any `json:"output_token_logprobs"`
	} `json:"meta_info"`
}

func idsJSON(n, base int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, base+i)
	}
	b.WriteByte(']')
	return b.String()
}

// TestGenerateSessionTurns: through the gateway, a session's (by
// X-SMG-Routing-Key) second /generate lands on the same worker and reports
// the first call's full blocks as cached, with the same ids and logprobs
// for the same context; vLLM's /inference/v1/generate by X-Session-ID too.
func TestGenerateSessionTurns(t *testing.T) {
	c := startE2E(t, true)
	hdr := map[string]string{"X-SMG-Routing-Key": "rollout-7"}
	body := `{"input_ids":` + idsJSON(100, 500) + `,"return_logprob":true,"sampling_params":{"max_new_tokens":8,"ignore_eos":true}}`
	var first genReply
	var worker string
	for turn := range 2 {
		resp, b := postJSON(t, c.srv.URL+GeneratePath, hdr, body)
		require.Equal(t, 200, resp.StatusCode, string(b))
		var r genReply
		require.NoError(t, json.Unmarshal(b, &r))
		if turn == 0 {
			first, worker = r, resp.Header.Get(HeaderWorker)
			require.NotEmpty(t, worker)
			require.Len(t, r.MetaInfo.OutputTokenLogprobs, 8)
			continue
		}
		require.Equal(t, worker, resp.Header.Get(HeaderWorker), "the second turn moved")
		require.Equal(t, 96, r.MetaInfo.CachedTokens, "the first call's full blocks (6 of 16 tokens) are cached")
		require.Equal(t, fmt.Sprint(first.MetaInfo.OutputTokenLogprobs), fmt.Sprint(r.MetaInfo.OutputTokenLogprobs))
		require.Equal(t, first.OutputIDs, r.OutputIDs)
	}
	vb := `{"model":"m","token_ids":` + idsJSON(64, 9000) + `,"sampling_params":{"max_tokens":4,"logprobs":0}}`
	var vworker string
	for turn := range 2 {
		resp, b := postJSON(t, c.srv.URL+InferenceGeneratePath, map[string]string{"X-Session-ID": "skyrl-1"}, vb)
		require.Equal(t, 200, resp.StatusCode, string(b))
		var r struct {
			Choices []struct {
				TokenIDs []uint32 `json:"token_ids"`
			} `json:"choices"`
			Usage struct {
				Details struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		require.NoError(t, json.Unmarshal(b, &r))
		require.Len(t, r.Choices[0].TokenIDs, 4)
		if turn == 0 {
			vworker = resp.Header.Get(HeaderWorker)
			continue
		}
		require.Equal(t, vworker, resp.Header.Get(HeaderWorker))
		require.Equal(t, 48, r.Usage.Details.Cached)
	}
}

// TestGenerateAbortThroughGateway: an abort by rid through the gateway
// reaches the worker holding the request, whose stream ends with finish
// reason abort; an unknown rid is a 400; a rid in flight cannot be
// reused.
func TestGenerateAbortThroughGateway(t *testing.T) {
	c := startE2E(t, true)
	body := `{"rid":"long-1","stream":true,"input_ids":` + idsJSON(40, 77) + `,"sampling_params":{"max_new_tokens":120000,"ignore_eos":true}}`
	req, err := http.NewRequest(http.MethodPost, c.srv.URL+GeneratePath, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-SMG-Routing-Key", "abort-me")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<24)
	aborted, fin := false, ""
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: {") {
			continue
		}
		if !aborted {
			aborted = true
			// Freeze the engines (in place) so the request is surely
			// still running when the abort comes, however fast.
			r, b := postJSON(t, c.srv.URL+"/pause_generation", nil, `{"mode":"in_place"}`)
			require.Equal(t, 200, r.StatusCode, string(b))
			r, b = postJSON(t, c.srv.URL+GeneratePath, nil, `{"rid":"long-1","input_ids":[1,2]}`)
			require.Equal(t, 400, r.StatusCode, string(b))
			r, b = postJSON(t, c.srv.URL+AbortPath, nil, `{"rid":"long-1"}`)
			require.Equal(t, 200, r.StatusCode, string(b))
			r, b = postJSON(t, c.srv.URL+"/continue_generation", nil, ``)
			require.Equal(t, 200, r.StatusCode, string(b))
		}
		var g genReply
		require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &g))
		if g.MetaInfo.FinishReason != nil {
			fin = g.MetaInfo.FinishReason.Type
			require.Less(t, g.MetaInfo.CompletionTokens, 120000)
		}
	}
	require.Equal(t, "abort", fin)
	r, b := postJSON(t, c.srv.URL+AbortPath, nil, `{"rid":"long-1"}`)
	require.Equal(t, 400, r.StatusCode, string(b))
	require.Contains(t, string(b), `{"error":{"message":"abort_request: unknown rid`)
	r, _ = postJSON(t, c.srv.URL+AbortPath, nil, `{"abort_all":true}`)
	require.Equal(t, 200, r.StatusCode)
}

// TestGenerateBadInput: bad input through the gateway is a 400 in the
// shape of the API asked, before any worker sees it.
func TestGenerateBadInput(t *testing.T) {
	c := startE2E(t, true)
	var huge bytes.Buffer
	huge.WriteString(`{"input_ids":[`)
	for i := range 10_000_000 {
		if i > 0 {
			huge.WriteByte(',')
		}
		huge.WriteByte('1')
	}
	huge.WriteString(`]}`)
	for _, tc := range []struct{ path, body, want string }{
		{GeneratePath, `{"input_ids":[1,-2]}`, "negative"},
		{GeneratePath, `{"input_ids":[1.5]}`, "not an integer"},
		{GeneratePath, `{"input_ids":[4294967296]}`, "vocabulary"},
		{GeneratePath, `{"rid":["a"],"input_ids":[1]}`, "one string"},
		{GeneratePath, `{"sampling_params":{}}`, "Either text or input_ids"},
		{GeneratePath, huge.String(), "more than 2097152 token ids"},
		{InferenceGeneratePath, `{"token_ids":[-1],"sampling_params":{}}`, "negative"},
		{InferenceGeneratePath, `{"token_ids":[],"sampling_params":{}}`, "at least one"},
	} {
		r, b := postJSON(t, c.srv.URL+tc.path, nil, tc.body)
		require.Equal(t, 400, r.StatusCode, "%.60s: %s", tc.body, b)
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal(b, &e), string(b))
		require.Contains(t, e.Error.Message, tc.want)
	}
}
