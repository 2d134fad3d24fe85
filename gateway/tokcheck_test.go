package gateway

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/engine/mock"
)

// offByOne is a wrong in-process tokenizer: the worker's own, plus a token.
type offByOne struct{ Tokenizer }

func (o offByOne) TokenizeChat(body []byte) ([]uint32, error) {
	t, err := o.Tokenizer.TokenizeChat(body)
	return append(t, 7), err
}

// TestTokenizerCheck runs chat requests through a Stack over a mock
// worker with an in-process tokenizer that is exact (the mock's own) and
// one that is not: the exact one passes its background checks against
// the worker's /tokenize and stays in use; the wrong one is caught by
// its first check and routing asks /tokenize from then on, every
// request still answered.
func TestTokenizerCheck(t *testing.T) {
	for _, exact := range []bool{true, false} {
		t.Run(fmt.Sprint("exact=", exact), func(t *testing.T) {
			m, err := mock.Start(mock.Config{Speedup: 1000})
			require.NoError(t, err)
			t.Cleanup(func() { m.Close() })
			tok := Tokenizer(m)
			if !exact {
				tok = offByOne{m}
			}
			reg := prometheus.NewRegistry()
			_, srv := testStack(t, StackConfig{Registry: reg, Gateway: Config{TokenizerCheckEvery: 2}},
				WorkerSpec{URL: m.URL(), Tokenizer: tok})
			checks := func(result string) float64 {
				return counterValue(t, reg, "agentkv_gateway_tokenizer_checks_total", map[string]string{"result": result})
			}
			source := func(s string) float64 {
				return counterValue(t, reg, "agentkv_gateway_prompt_tokens_source_total", map[string]string{"source": s})
			}
			send := func(i int) {
				body := fmt.Sprintf(`{"model":"%s","max_tokens":4,"messages":[{"role":"user","content":"request %d reads the file"}]}`, mock.DefaultModel, i)
				resp, b := postJSON(t, srv.URL+ChatPath, nil, body)
				require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
			}
			send(0)
			require.Eventually(t, func() bool { return checks("match")+checks("mismatch") == 1 }, 10*time.Second, time.Millisecond,
				"the first in-process tokenization is checked")
			for i := 1; i <= 8; i++ {
				send(i)
			}
			if exact {
				require.Equal(t, 9.0, source("inprocess"))
				require.Eventually(t, func() bool { return checks("match") >= 2 }, 10*time.Second, time.Millisecond)
				require.Zero(t, checks("mismatch"))
				return
			}
			require.Equal(t, 1.0, checks("mismatch"))
			require.Equal(t, 1.0, source("inprocess"), "only the first request, before its check failed")
			require.Equal(t, 8.0, source("tokenize"))
		})
	}
}
