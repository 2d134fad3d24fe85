package gateway

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/internal/apiwire"
)

// FuzzTranslateRequests: whatever the body, the request translators never
// panic, and a translation they accept is a chat request that marshals and
// has messages.
func FuzzTranslateRequests(f *testing.F) {
	for _, s := range []string{
		sprintf(codexTurn, "true", ""), sprintf(claudeTurn, "false", toolResult),
		`{"input":"hi"}`, `{"input":[{"role":"user","content":"x"}]}`, `{"input":[{"type":"function_call_output","output":[{"type":"input_text","text":"a"}]}]}`,
		`{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA"}}]}]}`,
		`{"tools":[{"type":"custom","name":"apply_patch"}],"input":[{"type":"custom_tool_call","name":"apply_patch","input":"x"}]}`,
		`{"system":[{"type":"text"}],"messages":[{"role":"assistant","content":[{"type":"tool_use","input":null}]}]}`,
		`{"tool_choice":{"type":"tool","name":"x"},"messages":[{"role":"user","content":""}]}`,
		`{}`, `[]`, `null`, `{"input":7}`, `{"messages":"x"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, tr := range []func([]byte) (*apiwire.ChatRequest, error){
			func(b []byte) (*apiwire.ChatRequest, error) { c, _, err := responsesToChat(b); return c, err },
			messagesToChat,
		} {
			cr, err := tr(body)
			if err != nil {
				require.ErrorIs(t, err, ErrBadRequest)
				continue
			}
			require.NotEmpty(t, cr.Messages)
			b, err := json.Marshal(cr)
			require.NoError(t, err)
			require.True(t, json.Valid(b))
		}
		_, _ = StripBilling(body)
	})
}

// FuzzTranslateReplies: the reply translators and the usage sniffers take
// any bytes from a worker without panicking; whole replies they accept
// translate to valid JSON.
func FuzzTranslateReplies(f *testing.F) {
	for _, s := range []string{
		`{"id":"x","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":3}}}`,
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":3,\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n",
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1,\"cache_read_input_tokens\":4}}}\n\n",
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":3}}}\n\n",
		`{"choices":null}`, `{"choices":[{"message":{"content":7}}]}`, "data: {\n", "",
	} {
		f.Add([]byte(s))
	}
	req := &apiwire.ChatRequest{Model: "m"}
	f.Fuzz(func(t *testing.T, b []byte) {
		if out, _, err := chatToResponses(b, req, map[string]bool{"f": true}, "r"); err == nil {
			require.True(t, json.Valid(out))
		}
		if out, _, err := chatToMessages(b, "m"); err == nil {
			require.True(t, json.Valid(out))
		}
		for _, api := range []API{Chat, Responses, Messages} {
			for _, stream := range []bool{false, true} {
				sn := newSniffer(api, stream)
				half := len(b) / 2
				sn.write(b[:half])
				sn.write(b[half:])
				u := sn.finish()
				require.GreaterOrEqual(t, len(u.ToolCalls), 0)
			}
		}
		for _, mk := range []func(w http.ResponseWriter) translator{
			func(w http.ResponseWriter) translator {
				return newResponsesStream(newEventWriter(w), "r", "m", 1, req, nil)
			},
			func(w http.ResponseWriter) translator { return newMessagesStream(newEventWriter(w), "m", "m", 3) },
		} {
			rec := httptest.NewRecorder()
			tr := mk(rec)
			tr.start()
			var sc sseScanner
			sc.on = func(_ string, data []byte) {
				var ch apiwire.ChatChunk
				if json.Unmarshal(data, &ch) == nil {
					tr.chunk(&ch)
				}
			}
			sc.feed(b)
			sc.flush()
			tr.end(Usage{}, bytes.Contains(b, []byte("DONE")), "cut")
			var n int
			var check sseScanner
			check.on = func(_ string, data []byte) {
				n++
				require.True(t, json.Valid(data), string(data))
			}
			check.feed(rec.Body.Bytes())
			require.Greater(t, n, 1)
		}
	})
}

// FuzzGatewayRequest: any body on any API gets a deliberate status (never
// a 5xx of the gateway's own, never a panic), and no request leaks load.
func FuzzGatewayRequest(f *testing.F) {
	for _, s := range []string{`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","input":"hi","stream":true}`, `{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"x"}],"stream":true}`,
		`{`, `{"messages":[null]}`, `{"input":[{}]}`} {
		f.Add(byte(0), []byte(s))
		f.Add(byte(2), []byte(s))
		f.Add(byte(3), []byte(s))
	}
	cf := &chatOnly{cachedTokens: 1}
	cf.srv = httptest.NewServer(http.HandlerFunc(cf.serve))
	defer cf.srv.Close()
	r, err := agentkv.New(agentkv.Config{BlockSize: 16, Approximate: true})
	require.NoError(f, err)
	require.NoError(f, r.AddWorker(agentkv.WorkerFunc(func() agentkv.WorkerInfo {
		return agentkv.WorkerInfo{ID: 0, BlockSize: 16, KVCapacityTokens: 1 << 16}
	})))
	g, err := New(Config{Router: r, Workers: []Worker{{ID: 0, URL: cf.srv.URL}}, MaxBodyBytes: 1 << 16})
	require.NoError(f, err)
	apis := []API{Chat, Completions, Responses, Messages, CountTokens}
	f.Fuzz(func(t *testing.T, which byte, body []byte) {
		a := apis[int(which)%len(apis)]
		req := httptest.NewRequest(http.MethodPost, a.Path(), bytes.NewReader(body))
		req.Header.Set("X-Session-Id", "fuzz")
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, req)
		switch {
		case rec.Code == http.StatusOK, rec.Code == http.StatusBadRequest, rec.Code == http.StatusRequestEntityTooLarge:
		case rec.Code == http.StatusNotFound && a == Completions && strings.Contains(rec.Body.String(), "NotFoundError"):
			// The chat-only engine's own 404 for text completions, passed through.
		default:
			t.Fatalf("%s: status %d for %q: %s", a, rec.Code, body, rec.Body.String())
		}
		for _, w := range r.Workers() {
			require.Equal(t, 0, r.WorkerLoad(w).Requests, "a request leaked its load")
		}
	})
}
