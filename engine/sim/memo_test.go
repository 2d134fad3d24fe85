package sim

import (
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/agentkv/agentkv/internal/cputime"
	"github.com/agentkv/agentkv/trace"
)

// memoWorkload is the synthetic agentic workload on pools small enough that
// the head of a queue is often blocked (long, mostly cached prompts).
func memoWorkload(sessions int) *trace.Workload {
	cfg := trace.DefaultSyntheticConfig()
	cfg.Sessions = sessions
	w := trace.Synthetic(cfg)
	return &w
}

func runMemo(t testing.TB, w *trace.Workload, cfg Config, rematch bool, conc int) (*Result, []*Request, []Stats, int64) {
	p := newPrefixRouter(3, 16)
	es := engines(t, 3, cfg, p.sink)
	for _, e := range es {
		e.rematch = rematch
	}
	res, reqs := run(t, w, es, p, ReplayConfig{MaxActiveSessions: conc})
	st := make([]Stats, len(es))
	var skips int64
	for i, e := range es {
		st[i] = e.Stats()
		skips += e.skips
	}
	return res, reqs, st, skips
}

// TestHeadMemoChangesNothing: remembering why the head of the queue did
// not fit is an optimisation only. Runs with and without it, on pools that
// block the head often (with and without a host tier), schedule every
// request identically: the same per-request fields, engine counters and
// results.
func TestHeadMemoChangesNothing(t *testing.T) {
	w := memoWorkload(24)
	for _, cfg := range []Config{
		{DeviceBlocks: 4000},
		{DeviceBlocks: 4000, HostBlocks: 3000},
		{DeviceBlocks: 2600, MaxBatchedTokens: 2048},
	} {
		t.Run("device="+strconv.Itoa(cfg.DeviceBlocks)+"/host="+strconv.Itoa(cfg.HostBlocks), func(t *testing.T) {
			a, ra, sa, skips := runMemo(t, w, cfg, false, 16)
			b, rb, sb, none := runMemo(t, w, cfg, true, 16)
			t.Logf("lookups saved: %d", skips)
			if skips == 0 || none != 0 {
				t.Fatalf("memo saved %d lookups (rematch: %d): the pools never blocked the head, the test checks nothing", skips, none)
			}
			if !reflect.DeepEqual(sa, sb) {
				t.Fatalf("engine stats differ:\nmemo    %+v\nrematch %+v", sa, sb)
			}
			if len(ra) != len(rb) {
				t.Fatalf("%d vs %d requests", len(ra), len(rb))
			}
			for i := range ra {
				x, y := *ra[i], *rb[i]
				x.st, y.st = nil, nil
				if !reflect.DeepEqual(x, y) {
					t.Fatalf("request %d differs:\nmemo    %+v\nrematch %+v", i, x, y)
				}
			}
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("results differ")
			}
		})
	}
}

// BenchmarkBlockedHead replays the synthetic agentic workload (64, 256 and
// 1,024 root sessions: about 0.4 K, 1.6 K and 6.5 K requests) on three
// workers with pools the working set outgrows, with the blocked-head memo
// ("memo") and with the head's prompt looked up again on every step
// ("rematch", the engine before the memo), in the same process.
// us/request is CPU time per request: flat when the cost is linear.
func BenchmarkBlockedHead(b *testing.B) {
	for _, sessions := range []int{64, 256, 1024} {
		w := memoWorkload(sessions)
		for _, mode := range []string{"memo", "rematch"} {
			b.Run("sessions="+strconv.Itoa(sessions)+"/"+mode, func(b *testing.B) {
				var cpu time.Duration
				var res *Result
				for b.Loop() {
					c0 := cputime.Process()
					res, _, _, _ = runMemo(b, w, Config{DeviceBlocks: 8000}, mode == "rematch", 64)
					cpu += cputime.Process() - c0
				}
				per := cpu.Seconds() / float64(b.N)
				b.ReportMetric(per, "cpu-s/op")
				b.ReportMetric(per/float64(res.Requests)*1e6, "us/request")
			})
		}
	}
}
