package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/gateway/translate"
	"github.com/agentkv/agentkv/internal/apiwire"
)

// chaosResult is what a chaos run's clients saw.
type chaosResult struct {
	requests, failedBeforeFirstByte, erroredMidStream, migrated int64
	sessionsDone                                                int64
	prompt, cached                                              int64
}

func (r *chaosResult) hitRate() float64 { return float64(r.cached) / float64(max(r.prompt, 1)) }

// runChaos drives sessions concurrent multi-turn chat sessions (streamed,
// usage on; each turn resends the conversation) through a fleet of three
// mock workers for dur; with kill, worker (k mod 3) is killed every
// period and restarted period/4 later.
func runChaos(t *testing.T, sessions, turns int, kill, admission bool, period, dur time.Duration) chaosResult {
	fc := fastFailover()
	fc.MigrationLimit = 2
	f := newFleet(t, 3, nil, Config{Failover: fc}, admission)
	for i := range 3 {
		f.waitRoutable(i, true)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var res chaosResult
	stop := make(chan struct{})
	var chaos sync.WaitGroup
	if kill {
		chaos.Add(1)
		go func() {
			defer chaos.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				case <-time.After(period):
				}
				f.kill(k % 3)
				select {
				case <-stop:
				case <-time.After(period / 4):
				}
				f.revive(k % 3)
			}
		}()
	}
	var wg sync.WaitGroup
	for s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msgs := []map[string]string{{"role": "system", "content": longPrompt(-1)},
				{"role": "user", "content": longPrompt(s)}}
			for turn := range turns {
				if ctx.Err() != nil {
					break // time is up: the session ran to the end
				}
				body, _ := json.Marshal(map[string]any{"model": "m", "stream": true, "max_tokens": 48, "messages": msgs})
				atomic.AddInt64(&res.requests, 1)
				resp, text, err := f.post(ctx, ChatPath, fmt.Sprintf("chaos%d", s), string(body))
				if ctx.Err() != nil {
					break
				}
				if err != nil || resp.StatusCode != http.StatusOK {
					atomic.AddInt64(&res.failedBeforeFirstByte, 1)
					t.Logf("session %d turn %d: %v %v", s, turn, err, text)
					return
				}
				reply, events, u := chatStreamResult(text)
				if events == 0 || !strings.HasSuffix(strings.TrimSpace(text), "data: [DONE]") {
					atomic.AddInt64(&res.erroredMidStream, 1)
					return // the session ends: its client saw an error event
				}
				atomic.AddInt64(&res.prompt, int64(u.PromptTokens))
				atomic.AddInt64(&res.cached, int64(u.CachedTokens))
				msgs = append(msgs, map[string]string{"role": "assistant", "content": reply},
					map[string]string{"role": "user", "content": fmt.Sprintf("tool output %d %d ok", s, turn)})
			}
			atomic.AddInt64(&res.sessionsDone, 1)
		}()
	}
	wg.Wait()
	close(stop)
	chaos.Wait()
	res.migrated = int64(testutil.ToFloat64(f.stack.gw.m.failures.WithLabelValues("chat", "migrated")))
	return res
}

// chatStreamResult reads a chat stream: its text, its chunk count, its
// usage.
func chatStreamResult(body string) (string, int, Usage) {
	var s translate.SSEScanner
	var b strings.Builder
	var u Usage
	n := 0
	s.On = func(_ string, data []byte) {
		var ch apiwire.ChatChunk
		if json.Unmarshal(data, &ch) != nil {
			return
		}
		n++
		translate.Learn(&ch, &u)
		for _, c := range ch.Choices {
			b.WriteString(deref(c.Delta.Content))
		}
	}
	s.Feed([]byte(body))
	s.Flush()
	return b.String(), n, u
}

// TestFailoverChaos: concurrent multi-turn sessions over three mock
// workers while one after another is killed and restarted. No request
// fails before its first byte (retries find a live worker); streams cut
// mid-way are migrated or end with the error event; the hit rate stays
// near a run without faults. AGENTKV_CHAOS_FULL=1 runs the issue's
// figure: 200 sessions, a kill every 20 s, two minutes.
func TestFailoverChaos(t *testing.T) {
	sessions, period, dur := 100, 2*time.Second, 10*time.Second
	if os.Getenv("AGENTKV_CHAOS_FULL") != "" {
		sessions, period, dur = 200, 20*time.Second, 2*time.Minute
	}
	const turns = 1 << 20 // until dur ends
	// With admission too: every session is then a program placed on a
	// worker, which the router must move off a dead one.
	for _, admission := range []bool{false, true} {
		t.Run(fmt.Sprint("admission=", admission), func(t *testing.T) {
			base := runChaos(t, sessions, turns, false, admission, period, dur)
			hit := runChaos(t, sessions, turns, true, admission, period, dur)
			t.Logf("no faults: %d requests, %d sessions done, hit rate %.3f", base.requests, base.sessionsDone, base.hitRate())
			t.Logf("chaos: %d requests, %d failed before the first byte, %d migrated, %d ended with an error event, %d sessions done, hit rate %.3f",
				hit.requests, hit.failedBeforeFirstByte, hit.migrated, hit.erroredMidStream, hit.sessionsDone, hit.hitRate())
			require.Zero(t, base.failedBeforeFirstByte+base.erroredMidStream)
			require.Zero(t, hit.failedBeforeFirstByte, "no request failed before its first byte")
			require.Greater(t, base.hitRate(), 0.5)
			require.Greater(t, hit.hitRate(), base.hitRate()-0.3, "the hit rate holds up under chaos")
		})
	}
	// Most kills find requests before their first byte (the mock decodes
	// fast): those are retried. TestFailoverMigration covers the cut
	// stream deterministically.
}
