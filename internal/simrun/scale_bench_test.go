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
// simulate's default cluster (4 workers of 27,500 blocks) with KV-aware
// routing at 128 concurrent programs, the CLI's heaviest default level.
// cpu-s/op is the process CPU time of one replay; us/request the CPU time
// per request, which stays flat when the cost is linear in requests.
func BenchmarkKVScale(b *testing.B) {
	for _, sessions := range []int{128, 512, 2048} {
		cfg := trace.DefaultSyntheticConfig()
		cfg.Sessions = sessions
		w := trace.Synthetic(cfg)
		b.Run("sessions="+strconv.Itoa(sessions), func(b *testing.B) {
			opt := Options{Cluster: Cluster{Workers: 4, DeviceBlocks: 27500}, Policy: mustPolicy(b, "kv"), Concurrency: 128, Seed: 1}
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
