package gateway

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv"
)

// TestFailoverMigrationBeforeText: with migration on, a stream cut after
// its first event but before any text (an engine killed during prefill:
// vLLM and the mock send the assistant role chunk first) is migrated too,
// as the original request again: the client sees one clean stream. It
// used to end with the error event, since there was no text to continue.
func TestFailoverMigrationBeforeText(t *testing.T) {
	good := newChatOnly(t)
	inner := newChatOnly(t)
	var cuts atomic.Int64
	cutter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != ChatPath {
			inner.serve(w, r)
			return
		}
		cuts.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n"))
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the engine dies in prefill
	}))
	t.Cleanup(cutter.Close)
	fc := fastFailover()
	fc.MigrationLimit = 1
	s, srv := testStack(t, StackConfig{Policy: agentkv.RoundRobin, Gateway: Config{Failover: fc}}, WorkerSpec{URL: cutter.URL}, WorkerSpec{URL: good.srv.URL})
	require.Eventually(t, func() bool { return s.Gateway().Tracker().Routable(0) && s.Gateway().Tracker().Routable(1) },
		10e9, 5e6)
	for i := 0; cuts.Load() < 4; i++ {
		require.Less(t, i, 60, "the cutting worker was never chosen")
		path := []string{ChatPath, MessagesPath}[i%2]
		resp, body := postJSON(t, srv.URL+path, map[string]string{"X-Dynamo-Session-Id": "s" + strconv.Itoa(i)},
			bodyFor(path, "hello number "+strconv.Itoa(i), true))
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		text, events := streamText(t, string(body))
		require.NotContains(t, events, "error", "%s: %v", path, events)
		require.NotContains(t, events, "error-chunk", "%s: %v", path, events)
		require.Equal(t, map[string]string{ChatPath: "[DONE]", MessagesPath: "message_stop"}[path], events[len(events)-1], "%v", events)
		require.Equal(t, "ok 1", text, "%s: the whole reply, once", path)
		if path == ChatPath {
			roles := 0
			for _, d := range sseDatas(t, body) {
				if c, _ := d["choices"].([]any); len(c) > 0 {
					if dl, _ := c[0].(map[string]any)["delta"].(map[string]any); dl["role"] != nil {
						roles++
					}
				}
			}
			require.Equal(t, 1, roles, "one role chunk")
		}
	}
	migrated := testutil.ToFloat64(s.gw.m.failures.WithLabelValues("chat", "migrated")) +
		testutil.ToFloat64(s.gw.m.failures.WithLabelValues("messages", "migrated"))
	require.Equal(t, float64(cuts.Load()), migrated, "every cut stream migrated")
}

// sseDatas decodes the data of every event of an SSE body but [DONE].
func sseDatas(t *testing.T, body []byte) []map[string]any {
	t.Helper()
	_, datas := sseEvents(t, body)
	return datas
}
