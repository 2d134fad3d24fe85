package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFlushClearsIndex: between rollout steps the trainer pauses, flushes
// and continues through the gateway; the flush reaches every worker and
// clears their index entries at once, so the next turn reports 0 cached
// tokens and the router predicted 0 (no stale credit). The router-level
// pause holds a new turn until resume; GET /workers lists the workers.
func TestFlushClearsIndex(t *testing.T) {
	c := startE2E(t, true)
	hdr := map[string]string{"X-SMG-Routing-Key": "step-session"}
	body := `{"input_ids":` + idsJSON(160, 300) + `,"sampling_params":{"max_new_tokens":4,"ignore_eos":true}}`
	resp, b := postJSON(t, c.srv.URL+GeneratePath, hdr, body)
	require.Equal(t, 200, resp.StatusCode, string(b))
	var wid uint64
	for i, m := range c.mocks {
		if m.URL() == resp.Header.Get(HeaderWorker) {
			wid = c.stack.WorkerInfo(i).ID
		}
	}
	require.True(t, c.waitFor(30*time.Second, func() bool { return c.deviceBlocks(wid) >= 10 }), "the first turn's blocks never reached the index")
	resp, _ = postJSON(t, c.srv.URL+GeneratePath, hdr, body)
	pred, _ := strconv.Atoi(resp.Header.Get(HeaderCachedTokens))
	require.Positive(t, pred, "before the flush the router credits the prefix")

	for _, p := range []string{"/pause_generation", "/flush_cache", "/update_weights_from_disk", "/continue_generation"} {
		r, b := postJSON(t, c.srv.URL+p, nil, `{}`)
		require.Equal(t, 200, r.StatusCode, "%s: %s", p, b)
		require.Contains(t, string(b), `"success":true`)
	}
	require.Zero(t, c.deviceBlocks(wid), "the flush left index entries")
	resp, b = postJSON(t, c.srv.URL+GeneratePath, hdr, body)
	require.Equal(t, 200, resp.StatusCode, string(b))
	var r genReply
	require.NoError(t, json.Unmarshal(b, &r))
	require.Zero(t, r.MetaInfo.CachedTokens, "the engine kept cache through the flush")
	require.Equal(t, "0", resp.Header.Get(HeaderCachedTokens), "stale credit after the flush")

	// Router-level pause: a new turn waits until resume.
	pr, _ := postJSON(t, c.srv.URL+PausePath, nil, ``)
	require.Equal(t, 200, pr.StatusCode)
	done := make(chan int, 1)
	go func() {
		r, _ := postJSON(t, c.srv.URL+GeneratePath, hdr, body)
		done <- r.StatusCode
	}()
	var wl struct {
		Workers []struct {
			URL string `json:"url"`
		} `json:"workers"`
		Total  int  `json:"total"`
		Paused bool `json:"router_paused"`
	}
	gr, err := http.Get(c.srv.URL + WorkersPath)
	require.NoError(t, err)
	b, err = io.ReadAll(gr.Body)
	gr.Body.Close()
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &wl))
	require.Equal(t, e2eWorkers, wl.Total)
	require.True(t, wl.Paused)
	select {
	case code := <-done:
		t.Fatalf("a turn ran while the router was paused (%d)", code)
	default:
	}
	rr, _ := postJSON(t, c.srv.URL+ResumePath, nil, ``)
	require.Equal(t, 200, rr.StatusCode)
	require.Equal(t, 200, <-done)
}
