package main

import (
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/gateway"
	"github.com/agentkv/agentkv/internal/freeport"
)

// TestProxyFlagsConfig: the proxy's flags as the stack's configuration.
// As in the library, 0 means a flag's default and "off" disables.
func TestProxyFlagsConfig(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		check func(t *testing.T, cfg gateway.StackConfig, sc gateway.ServerConfig)
		err   string // a parse or config error containing this
	}{
		{name: "defaults", check: func(t *testing.T, cfg gateway.StackConfig, sc gateway.ServerConfig) {
			require.Equal(t, agentkv.KVAware, cfg.Policy)
			require.Equal(t, gateway.DefaultAffinity, cfg.Affinity)
			require.Zero(t, cfg.BlockSize)
			require.Zero(t, cfg.Refresh, "the stack's default refresh")
			require.Zero(t, cfg.Gateway.FirstByteTimeout, "the gateway's default first-byte timeout")
			require.Zero(t, cfg.Gateway.Failover.MigrationLimit)
			require.True(t, cfg.Gateway.StripBillingHeader)
			require.Equal(t, gateway.DefaultTick, cfg.Tick)
			require.Equal(t, int64(gateway.DefaultMaxBodyBytes), sc.MaxBodyBytes)
			require.Equal(t, int64(gateway.DefaultMaxBodyBytesInFlight), sc.MaxBodyBytesInFlight)
			require.Empty(t, cfg.Workers)
		}},
		{name: "workers in order", args: []string{"--worker", "http://a:1,events=tcp://a:5557", "--worker", "http://b:2"},
			check: func(t *testing.T, cfg gateway.StackConfig, _ gateway.ServerConfig) {
				require.Len(t, cfg.Workers, 2)
				require.Equal(t, "http://a:1", cfg.Workers[0].URL)
				require.Equal(t, "tcp://a:5557", cfg.Workers[0].Events)
				require.Equal(t, "http://b:2", cfg.Workers[1].URL)
			}},
		{name: "ejection time and context", args: []string{"--ejection-time", "7s", "--context-tokens", "32768"},
			check: func(t *testing.T, cfg gateway.StackConfig, _ gateway.ServerConfig) {
				require.Equal(t, 7*time.Second, cfg.Gateway.Failover.Breaker.OpenFor)
				require.Equal(t, 32768, cfg.Gateway.Failover.Outlier.ContextTokens)
			}},
		{name: "ejection time 0", args: []string{"--ejection-time", "0"}, err: "--ejection-time"},
		{name: "context tokens negative", args: []string{"--context-tokens", "-1"}, err: "--context-tokens"},
		{name: "refresh off", args: []string{"--refresh", "off"}, check: func(t *testing.T, cfg gateway.StackConfig, _ gateway.ServerConfig) {
			require.Negative(t, cfg.Refresh)
		}},
		{name: "refresh 0 is the default", args: []string{"--refresh", "0"}, check: func(t *testing.T, cfg gateway.StackConfig, _ gateway.ServerConfig) {
			require.Zero(t, cfg.Refresh)
		}},
		{name: "refresh 10s", args: []string{"--refresh", "10s"}, check: func(t *testing.T, cfg gateway.StackConfig, _ gateway.ServerConfig) {
			require.Equal(t, 10*time.Second, cfg.Refresh)
		}},
		{name: "first byte off", args: []string{"--first-byte-timeout", "off"}, check: func(t *testing.T, cfg gateway.StackConfig, _ gateway.ServerConfig) {
			require.Negative(t, cfg.Gateway.FirstByteTimeout)
		}},
		{name: "first byte 0 is the default", args: []string{"--first-byte-timeout", "0s"}, check: func(t *testing.T, cfg gateway.StackConfig, _ gateway.ServerConfig) {
			require.Zero(t, cfg.Gateway.FirstByteTimeout)
		}},
		{name: "first byte 5s", args: []string{"--first-byte-timeout", "5s"}, check: func(t *testing.T, cfg gateway.StackConfig, _ gateway.ServerConfig) {
			require.Equal(t, 5*time.Second, cfg.Gateway.FirstByteTimeout)
		}},
		{name: "stream idle 5s", args: []string{"--stream-idle-timeout", "5s"}, check: func(t *testing.T, cfg gateway.StackConfig, _ gateway.ServerConfig) {
			require.Equal(t, 5*time.Second, cfg.Gateway.StreamIdleTimeout)
		}},
		{name: "stream idle off", args: []string{"--stream-idle-timeout", "off"}, check: func(t *testing.T, cfg gateway.StackConfig, _ gateway.ServerConfig) {
			require.Negative(t, cfg.Gateway.StreamIdleTimeout)
		}},
		{name: "stream idle 0 is the default", args: []string{"--stream-idle-timeout", "0s"}, check: func(t *testing.T, cfg gateway.StackConfig, _ gateway.ServerConfig) {
			require.Zero(t, cfg.Gateway.StreamIdleTimeout)
		}},
		{name: "migration 3", args: []string{"--migration-limit", "3"}, check: func(t *testing.T, cfg gateway.StackConfig, _ gateway.ServerConfig) {
			require.Equal(t, 3, cfg.Gateway.Failover.MigrationLimit)
		}},
		{name: "migration off", args: []string{"--migration-limit", "3", "--migration-limit", "off"}, check: func(t *testing.T, cfg gateway.StackConfig, _ gateway.ServerConfig) {
			require.Zero(t, cfg.Gateway.Failover.MigrationLimit)
		}},
		{name: "round robin, hard affinity, admission", args: []string{"--policy", "round-robin", "--affinity", "hard", "--admission", "--block-size", "16"},
			check: func(t *testing.T, cfg gateway.StackConfig, _ gateway.ServerConfig) {
				require.Equal(t, agentkv.RoundRobin, cfg.Policy)
				require.Equal(t, agentkv.AffinityHard, cfg.Affinity)
				require.True(t, cfg.Admission)
				require.Equal(t, 16, cfg.BlockSize)
			}},
		{name: "server limits", args: []string{"--max-body", "1024", "--max-body-in-flight", "4096", "--max-header", "512", "--body-timeout", "2s"},
			check: func(t *testing.T, cfg gateway.StackConfig, sc gateway.ServerConfig) {
				require.Equal(t, int64(1024), sc.MaxBodyBytes)
				require.Equal(t, int64(1024), cfg.Gateway.MaxBodyBytes)
				require.Equal(t, int64(4096), sc.MaxBodyBytesInFlight)
				require.Equal(t, 512, sc.MaxHeaderBytes)
				require.Equal(t, 2*time.Second, sc.BodyReadTimeout)
			}},
		{name: "negative refresh", args: []string{"--refresh", "-1s"}, err: "want a duration ≥ 0 or off"},
		{name: "negative migration", args: []string{"--migration-limit", "-1"}, err: "want a number ≥ 0 or off"},
		{name: "bad policy", args: []string{"--policy", "bogus"}, err: "--policy"},
		{name: "bad affinity", args: []string{"--affinity", "sometimes"}, err: "--affinity"},
		{name: "negative block size", args: []string{"--block-size", "-1"}, err: "--block-size"},
		{name: "zero tick", args: []string{"--tick", "0"}, err: "--tick"},
		{name: "zero probe", args: []string{"--probe-interval", "0"}, err: "--probe-interval"},
		{name: "metrics not a path", args: []string{"--metrics", "metrics"}, err: "--metrics"},
		{name: "in flight below one body", args: []string{"--max-body", "1024", "--max-body-in-flight", "10"}, err: "--max-body-in-flight"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var f proxyFlags
			f.register(fs)
			err := fs.Parse(tc.args)
			var cfg gateway.StackConfig
			var sc gateway.ServerConfig
			if err == nil {
				cfg, sc, err = f.config()
			}
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			tc.check(t, cfg, sc)
		})
	}
}

// TestProxyModelAlias runs "agentkv proxy --mock-workers 1 --model-alias
// 'claude-*=agentkv-mock'" as a process: a Messages request for Claude
// Code's built-in "claude-sonnet-4-5" reaches the mock worker as its
// served model (the mock answers 404 for a model it does not serve, as a
// name no alias matches shows), and /v1/models lists the alias.
func TestProxyModelAlias(t *testing.T) {
	base := "http://127.0.0.1:" + strconv.Itoa(freeport.Port(t))
	p := startProcess(t, "proxy", "--listen", strings.TrimPrefix(base, "http://"), "--mock-workers", "1", "--mock-speedup", "1000",
		"--model-alias", "claude-*=agentkv-mock")
	p.line(t, "agentkv proxy listening on "+base)
	ask := func(model string) (*http.Response, []byte) {
		body, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 8,
			"messages": []chatMsg{{"user", "which model answers?"}}})
		return post(t, base+"/v1/messages", map[string]string{"anthropic-version": "2023-06-01"}, body)
	}
	resp, body := ask("claude-sonnet-4-5")
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var reply struct{ Model string }
	require.NoError(t, json.Unmarshal(body, &reply))
	require.Equal(t, "agentkv-mock", reply.Model, "the served model answered")
	resp, body = ask("gpt-4o")
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "no alias: the mock refuses a model it does not serve: %s", body)

	r, err := http.Get(base + "/v1/models")
	require.NoError(t, err)
	defer r.Body.Close()
	var models struct{ Data []struct{ ID, Root string } }
	require.NoError(t, json.NewDecoder(r.Body).Decode(&models))
	var ids []string
	for _, m := range models.Data {
		ids = append(ids, m.ID)
		if m.ID == "claude-*" {
			require.Equal(t, "agentkv-mock", m.Root)
		}
	}
	require.Equal(t, []string{"agentkv-mock", "claude-*"}, ids)
}
