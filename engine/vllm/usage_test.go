package vllm

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestKVCacheUsage: the usage gauge under its current and its older name,
// the mean over data-parallel engines, values clamped to [0, 1], and
// clear errors for a missing gauge, a NaN, a bad line and an error status.
func TestKVCacheUsage(t *testing.T) {
	cases := []struct {
		name, body string
		status     int
		want       float64
		err        error
	}{
		{name: "current name", body: "# HELP x\nvllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.25\n", want: 0.25},
		{name: "older name", body: "vllm:gpu_cache_usage_perc{engine=\"0\"} 0.5\n", want: 0.5},
		{name: "current name first", body: "vllm:gpu_cache_usage_perc 0.9\nvllm:kv_cache_usage_perc 0.1\n", want: 0.1},
		{name: "mean over engines", body: "vllm:kv_cache_usage_perc{engine=\"0\"} 0.2\nvllm:kv_cache_usage_perc{engine=\"1\"} 0.6\n", want: 0.4},
		{name: "clamped", body: "vllm:kv_cache_usage_perc{engine=\"0\"} 1.5\nvllm:kv_cache_usage_perc{engine=\"1\"} -1\n", want: 0.5},
		{name: "a longer name is another metric", body: "vllm:kv_cache_usage_percent 0.3\n", err: ErrNoMetric},
		{name: "missing", body: "vllm:num_requests_running 3\n", err: ErrNoMetric},
		{name: "NaN", body: "vllm:kv_cache_usage_perc NaN\n", err: ErrMetricsSyntax},
		{name: "bad line", body: "vllm:kv_cache_usage_perc{engine=\"0\" 0.1\n", err: ErrMetricsSyntax},
		{name: "error status", status: http.StatusServiceUnavailable, err: ErrStatus},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				require.Equal(t, "/metrics", r.URL.Path)
				if tc.status != 0 {
					w.WriteHeader(tc.status)
				}
				io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			c, err := NewClient(srv.URL, nil)
			require.NoError(t, err)
			got, err := c.KVCacheUsage(context.Background())
			if tc.err != nil {
				require.True(t, errors.Is(err, tc.err), "got %v", err)
				return
			}
			require.NoError(t, err)
			require.InDelta(t, tc.want, got, 1e-12)
		})
	}
}
