package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/engine/mock"
)

// tokenStack is a Stack over one mock worker that serves only some token
// APIs, declared in its spec.
func tokenStack(t *testing.T, serves []mock.TokenAPI, declared TokenAPIs, speedup float64) (*Stack, string) {
	t.Helper()
	m, err := mock.Start(mock.Config{Events: "tcp://127.0.0.1:0", Speedup: speedup, Aliases: []string{"*"}, TokenAPIs: serves})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	s, srv := testStack(t, StackConfig{Gateway: Config{Failover: fastFailover()}, Registry: prometheus.NewRegistry()},
		WorkerSpec{URL: m.URL(), Events: m.EventsEndpoint(), TokenAPIs: declared})
	return s, srv.URL
}

// tokenResult is a token-API reply, read in either API's shape.
type tokenResult struct {
	ids    []uint32
	lps    []float64
	finish string
	cached int
}

// readTokenReply reads a whole or streamed reply of api.
func readTokenReply(t *testing.T, api TokenAPI, stream bool, body io.Reader) tokenResult {
	t.Helper()
	var objs [][]byte
	if stream {
		sc := bufio.NewScanner(body)
		sc.Buffer(nil, 1<<24)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "data: {") {
				objs = append(objs, []byte(strings.TrimPrefix(l, "data: ")))
			}
		}
	} else {
		b, err := io.ReadAll(body)
		require.NoError(t, err)
		objs = append(objs, b)
	}
	var r tokenResult
	for _, o := range objs {
		if api == TokenGenerate { // cumulative: the last object holds all
			var g genReply
			require.NoError(t, json.Unmarshal(o, &g), string(o))
			r.ids, r.lps = g.OutputIDs, nil
			for _, tr := range g.MetaInfo.OutputTokenLogprobs {
				r.lps = append(r.lps, tr[0].(float64))
			}
			if g.MetaInfo.FinishReason != nil {
				r.finish, r.cached = g.MetaInfo.FinishReason.Type, g.MetaInfo.CachedTokens
			}
			continue
		}
		var v struct {
			Choices []struct {
				TokenIDs []uint32 `json:"token_ids"`
				Logprobs *struct {
					Content []struct {
						Logprob float64 `json:"logprob"`
					} `json:"content"`
				} `json:"logprobs"`
				Finish *string `json:"finish_reason"`
			} `json:"choices"`
		}
		require.NoError(t, json.Unmarshal(o, &v), string(o))
		for _, c := range v.Choices {
			r.ids = append(r.ids, c.TokenIDs...)
			if c.Logprobs != nil {
				for _, l := range c.Logprobs.Content {
					r.lps = append(r.lps, l.Logprob)
				}
			}
			if c.Finish != nil {
				r.finish = *c.Finish
			}
		}
	}
	return r
}

func tokenBody(api TokenAPI, rid string, prompt, base, maxNew int, stream bool) string {
	if api == TokenGenerate {
		return fmt.Sprintf(`{"rid":%q,"input_ids":%s,"sampling_params":{"max_new_tokens":%d,"ignore_eos":true},"return_logprob":true,"stream":%v}`,
			rid, idsJSON(prompt, base), maxNew, stream)
	}
	return fmt.Sprintf(`{"request_id":%q,"model":"m","token_ids":%s,"sampling_params":{"max_tokens":%d,"ignore_eos":true,"logprobs":0},"stream":%v,"stream_options":{"include_usage":true}}`,
		rid, idsJSON(prompt, base), maxNew, stream)
}

// TestGenerateTranslated: a token-API call for a worker that serves
// another token API (or only the completions API) is translated, with the
// token ids and logprobs the worker's native API gives for the same
// prompt, whole and streamed.
func TestGenerateTranslated(t *testing.T) {
	ref, err := mock.Start(mock.Config{Speedup: 1000, Aliases: []string{"*"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ref.Close() })
	for _, w := range []struct {
		name     string
		serves   []mock.TokenAPI
		declared TokenAPIs
	}{
		{"inference-only", []mock.TokenAPI{mock.TokenInference}, TokenAPISet(TokenInference)},
		{"generate-only", []mock.TokenAPI{mock.TokenGenerate}, TokenAPISet(TokenGenerate)},
		{"completions-only", []mock.TokenAPI{}, TokenAPISet(TokenCompletions)},
	} {
		_, url := tokenStack(t, w.serves, w.declared, 1000)
		for _, api := range []TokenAPI{TokenGenerate, TokenInference} {
			for _, stream := range []bool{false, true} {
				name := fmt.Sprintf("%s/%s/stream=%v", w.name, api, stream)
				body := tokenBody(api, "", 70, 3000, 12, stream)
				rr, err := http.Post(ref.URL()+api.Path(), "application/json", strings.NewReader(body))
				require.NoError(t, err)
				want := readTokenReply(t, api, stream, rr.Body)
				rr.Body.Close()
				resp, err := http.Post(url+api.Path(), "application/json", strings.NewReader(body))
				require.NoError(t, err, name)
				require.Equal(t, http.StatusOK, resp.StatusCode, name)
				got := readTokenReply(t, api, stream, resp.Body)
				resp.Body.Close()
				require.Len(t, got.ids, 12, name)
				require.Equal(t, want.ids, got.ids, name)
				require.Equal(t, want.lps, got.lps, name)
				require.Equal(t, "length", got.finish, name)
			}
		}
	}
	// A text prompt cannot be translated: 400 in SGLang's shape.
	_, url := tokenStack(t, []mock.TokenAPI{mock.TokenInference}, TokenAPISet(TokenInference), 1000)
	r, b := postJSON(t, url+GeneratePath, nil, `{"text":"hello there"}`)
	require.Equal(t, http.StatusBadRequest, r.StatusCode, string(b))
	require.Contains(t, string(b), `{"error":{"message":`)
}

// TestGenerateTranslatedAbort: an abort by rid ends a translated stream
// with finish reason abort (the gateway closes the worker's connection)
// and releases its turn; an abort also reaches a request still waiting
// (here at the router's pause), which ends at once with finish reason
// abort.
func TestGenerateTranslatedAbort(t *testing.T) {
	s, url := tokenStack(t, []mock.TokenAPI{mock.TokenInference}, TokenAPISet(TokenInference), 1000)
	body := tokenBody(TokenGenerate, "tr-1", 40, 500, 120000, true)
	resp, err := http.Post(url+GeneratePath, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<24)
	aborted, fin, n := false, "", 0
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: {") {
			continue
		}
		if !aborted {
			aborted = true
			r, b := postJSON(t, url+"/pause_generation", nil, `{"mode":"in_place"}`)
			require.Equal(t, 200, r.StatusCode, string(b))
			r, b = postJSON(t, url+AbortPath, nil, `{"rid":"tr-1"}`)
			require.Equal(t, 200, r.StatusCode, string(b))
			r, b = postJSON(t, url+"/continue_generation", nil, ``)
			require.Equal(t, 200, r.StatusCode, string(b))
		}
		var g genReply
		require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &g))
		if g.MetaInfo.FinishReason != nil {
			fin, n = g.MetaInfo.FinishReason.Type, g.MetaInfo.CompletionTokens
		}
	}
	require.Equal(t, "abort", fin)
	require.Less(t, n, 120000)
	deadline := time.Now().Add(2 * time.Minute)
	for s.inFlight(s.worker(0)) != 0 {
		require.True(t, time.Now().Before(deadline), "the aborted request's turn was never released")
		time.Sleep(time.Millisecond)
	}
	// Waiting at the router's pause: the abort ends it.
	r, b := postJSON(t, url+PausePath, nil, ``)
	require.Equal(t, 200, r.StatusCode, string(b))
	type reply struct {
		code int
		res  tokenResult
	}
	done := make(chan reply, 1)
	go func() {
		resp, err := http.Post(url+InferenceGeneratePath, "application/json", strings.NewReader(tokenBody(TokenInference, "wait-1", 20, 9, 4, false)))
		if err != nil {
			done <- reply{}
			return
		}
		defer resp.Body.Close()
		done <- reply{resp.StatusCode, readTokenReply(t, TokenInference, false, resp.Body)}
	}()
	for s.Gateway().rids.get("wait-1") == nil {
		require.True(t, time.Now().Before(deadline), "the request never arrived")
		time.Sleep(time.Millisecond)
	}
	r, b = postJSON(t, url+AbortPath, nil, `{"rid":"wait-1"}`)
	require.Equal(t, 200, r.StatusCode, string(b))
	got := <-done
	require.Equal(t, http.StatusOK, got.code)
	require.Equal(t, "abort", got.res.finish)
	require.Empty(t, got.res.ids)
	r, b = postJSON(t, url+ResumePath, nil, ``)
	require.Equal(t, 200, r.StatusCode, string(b))
}
