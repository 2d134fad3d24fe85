package simrun

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/internal/cputime"
	"github.com/agentkv/agentkv/trace"
)

// BenchmarkKVScale replays the default synthetic workload at three sizes
// (128, 512 and 2,048 root sessions: about 1 K, 4 K and 14 K requests) on
// simulate's default cluster (4 workers of 440,000 tokens) with KV-aware
// routing at 128 concurrent programs, in 64-token blocks (simulate's
// default) and 16-token blocks (vLLM's default, 4× the blocks).
// cpu-s/op is the process CPU time of one replay; us/request the CPU time
// per request, which stays flat when the cost is linear in requests.
func BenchmarkKVScale(b *testing.B) {
	for _, bs := range []int{64, 16} {
		for _, sessions := range []int{128, 512, 2048} {
			cfg := trace.DefaultSyntheticConfig()
			cfg.Sessions = sessions
			w := trace.Synthetic(cfg)
			b.Run("bs="+strconv.Itoa(bs)+"/sessions="+strconv.Itoa(sessions), func(b *testing.B) {
				opt := Options{Cluster: Cluster{Workers: 4, BlockSize: bs, DeviceBlocks: 440_000 / bs}, Policy: mustPolicy(b, "kv"),
					Concurrency: 128, Seed: 1}
				var cpu time.Duration
				var last *Result
				for b.Loop() {
					c0 := cputime.Process()
					r, err := Run(&w, opt)
					require.NoError(b, err)
					cpu += cputime.Process() - c0
					last = r
				}
				per := cpu.Seconds() / float64(b.N)
				b.ReportMetric(per, "cpu-s/op")
				b.ReportMetric(float64(last.Requests), "requests")
				b.ReportMetric(per/float64(last.Requests)*1e6, "us/request")
			})
		}
	}
}
