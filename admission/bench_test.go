package admission

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"
)

// buildLoaded returns a controller with n programs on w workers: about half
// ACTING, the rest REASONING, worker utilisation spread around the band, and
// extra paused programs that do not fit (so every tick sorts and offers them).
// With ReserveGrowth, eight ended programs have taught it their growth first.
func buildLoaded(b *testing.B, n, w, paused int, cfg Config) *RawAdmitter {
	c, err := NewRawAdmitter(cfg)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	per := n / w
	for i := 0; i < w; i++ {
		// capacity so that per programs of ~2000 tokens sit near U = 0.8
		_ = c.AddWorker(WorkerID(i), int64(per)*2000*5/4+int64(rng.IntN(per*200)))
	}
	if cfg.Door != nil {
		// Past the cold start: programs were seen to grow to 2,000
		// tokens, the size the programs below have.
		learn(b, c, epoch, 2000)
	}
	for i := 0; i < n; i++ {
		id := fmt.Sprint("p", i)
		if _, err := c.StartRequest(epoch, id, int64(100+rng.IntN(400))); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		id := fmt.Sprint("p", i)
		_ = c.EndRequest(epoch, id, int64(1000+rng.IntN(2000)), 50)
		if i%2 == 0 {
			_, _ = c.StartRequest(epoch, id, 0)
		}
	}
	for i := 0; i < paused; i++ {
		_, _ = c.StartRequest(epoch, fmt.Sprint("q", i), 1<<30) // never fits
	}
	c.Drain(nil)
	return c
}

func percentile(ds []time.Duration, p float64) float64 {
	slices.Sort(ds)
	return float64(ds[int(p*float64(len(ds)-1))].Nanoseconds())
}

// BenchmarkTick: one control-loop round. "steady" ticks a loaded cluster with
// nothing to change but 1,000 unplaceable paused programs offered each time;
// "pressure" ticks right after every worker's capacity dropped by 20 %, so
// every worker pauses and marks (state rebuilt outside the timer). The
// "naive-scan" line is the utilisation pass of a per-worker scan over all
// programs, as upstream computes it, for comparison.
func BenchmarkTick(b *testing.B) {
	const n, w = 10000, 64
	// "steady-improved" is "steady" with Agentic's options (what simrun's
	// kv+admission and the proxy run: MaxWait, HomeFirst, a decaying
	// acting weight, ReserveGrowth, ResumeOnEnd, Rebalance) and every
	// program's shared prefix recorded (SetShared, four distinct prefixes).
	b.Run(fmt.Sprintf("n=%d/workers=%d/steady-improved", n, w), func(b *testing.B) {
		c := buildLoaded(b, n, w, 1000, Agentic())
		for i := 0; i < n; i++ {
			_ = c.SetShared(fmt.Sprint("p", i), 500, uint64(i%4))
		}
		benchSteadyTick(b, c)
	})
	b.Run(fmt.Sprintf("n=%d/workers=%d/steady", n, w), func(b *testing.B) {
		benchSteadyTick(b, buildLoaded(b, n, w, 1000, Config{}))
	})
	b.Run(fmt.Sprintf("n=%d/workers=%d/steady-decay", n, w), func(b *testing.B) {
		benchDecayTick(b, buildLoaded(b, n, w, 0, Config{DecayHalfLife: time.Hour}))
	})
	b.Run(fmt.Sprintf("n=%d/workers=%d/pressure", n, w), func(b *testing.B) {
		benchPressureTick(b, n, w)
	})
	b.Run(fmt.Sprintf("n=%d/workers=%d/naive-scan", n, w), func(b *testing.B) {
		benchNaiveScan(b, buildLoaded(b, n, w, 0, Config{}))
	})
}

// benchSteadyTick ticks c every 5 s of its clock, reporting the thread's
// CPU and the tick's p50 and p99.
func benchSteadyTick(b *testing.B, c *RawAdmitter) {
	now := epoch
	lat := make([]time.Duration, 0, b.N)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu0, ok := threadCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(5 * time.Second)
		t0 := time.Now()
		c.Tick(now)
		lat = append(lat, time.Since(t0))
		c.Drain(nil)
	}
	reportCPU(b, cpu0, ok)
	b.ReportMetric(percentile(lat, 0.5), "p50-ns")
	b.ReportMetric(percentile(lat, 0.99), "p99-ns")
}

// benchDecayTick ticks c (decaying acting weights) every second of its
// clock with 200 paused programs that pass the cheap reasoning-only bound
// but not the decayed load, so every tick runs the decay pass on every
// worker and places nothing.
func benchDecayTick(b *testing.B, c *RawAdmitter) {
	for i := 0; i < 200; i++ {
		_, _ = c.StartRequest(epoch, fmt.Sprint("r", i), 100_000)
	}
	c.Drain(nil)
	now := epoch
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu0, ok := threadCPU()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Second)
		c.Tick(now)
		c.Drain(nil)
	}
	reportCPU(b, cpu0, ok)
}

// benchPressureTick times one tick right after every worker's capacity
// dropped by 20 %, on a cluster of n programs on w workers rebuilt outside
// the timer each round.
func benchPressureTick(b *testing.B, n, w int) {
	lat := make([]time.Duration, 0, b.N)
	var paused, marked int
	var cpu time.Duration
	ok := true
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		c := buildLoaded(b, n, w, 0, Config{})
		for _, wi := range c.Workers(nil) {
			_ = c.SetCapacity(wi.ID, wi.Capacity*8/10)
		}
		runtime.GC()
		b.StartTimer()
		c0, ok0 := threadCPU()
		t0 := time.Now()
		r := c.Tick(epoch.Add(5 * time.Second))
		lat = append(lat, time.Since(t0))
		c1, ok1 := threadCPU()
		cpu += c1 - c0
		ok = ok && ok0 && ok1
		paused, marked = r.Paused, r.Marked
	}
	if ok {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
	b.ReportMetric(percentile(lat, 0.5), "p50-ns")
	b.ReportMetric(percentile(lat, 0.99), "p99-ns")
	b.ReportMetric(float64(paused), "paused/tick")
	b.ReportMetric(float64(marked), "marked/tick")
}

// benchNaiveScan is the utilisation pass of a per-worker scan over all of
// c's programs, as upstream computes it.
func benchNaiveScan(b *testing.B, c *RawAdmitter) {
	progs := make([]*program, 0, len(c.progs))
	for _, p := range c.progs {
		progs = append(progs, p)
	}
	var sink float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, wk := range c.workers {
			var u float64
			for _, p := range progs {
				if p.life == Active && p.w == wk {
					u += c.weight(p)
				}
			}
			sink += u / float64(wk.cap)
		}
	}
	_ = sink
}

// BenchmarkAdmit: one admission decision. "turn" starts a turn of an
// existing Active program (and ends it outside the count: two calls per
// iteration, reported per decision); "new" places a new program on the
// least-utilised of 64 workers (and ends its session); "admitter" is the
// locked wrapper's TryAdmit for a turn.
func BenchmarkAdmit(b *testing.B) {
	const n, w = 10000, 64
	b.Run(fmt.Sprintf("n=%d/workers=%d/turn", n, w), func(b *testing.B) {
		c := buildLoaded(b, n, w, 0, Config{})
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprint("p", i)
		}
		// make every program ACTING so each iteration is start+end
		for i := 0; i < n; i += 2 {
			_ = c.EndRequest(epoch, ids[i], 2000, 10)
		}
		c.Drain(nil)
		now := epoch
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			id := ids[i%n]
			if _, err := c.StartRequest(now, id, 0); err != nil {
				b.Fatal(err)
			}
			_ = c.EndRequest(now, id, 2000, 10)
			if len(c.pending) > 4096 {
				c.Drain(nil)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/decision")
	})
	b.Run(fmt.Sprintf("n=%d/workers=%d/new", n, w), func(b *testing.B) {
		c := buildLoaded(b, n, w, 0, Config{})
		for _, wi := range c.Workers(nil) {
			_ = c.SetCapacity(wi.ID, wi.Capacity*4) // room for new programs
		}
		ids := make([]string, 1024)
		for i := range ids {
			ids[i] = fmt.Sprint("new", i)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			id := ids[i%len(ids)]
			adm, err := c.StartRequest(epoch, id, 1000)
			if err != nil || !adm.Run {
				b.Fatalf("%+v %v", adm, err)
			}
			_ = c.EndSession(epoch, id)
			if len(c.pending) > 4096 {
				c.Drain(nil)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/decision")
	})
	b.Run(fmt.Sprintf("n=%d/workers=%d/admitter-turn", n, w), func(b *testing.B) {
		a, err := New(Config{MaxPending: 1}, ClockFunc(func() time.Time { return epoch }))
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < w; i++ {
			_ = a.AddWorker(WorkerID(i), 1<<30)
		}
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprint("p", i)
			_, _ = a.TryAdmit(ids[i], 1000)
			_ = a.EndRequest(ids[i], 1000, 10)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			id := ids[i%n]
			if _, err := a.TryAdmit(id, 0); err != nil {
				b.Fatal(err)
			}
			_ = a.EndRequest(id, 1000, 10)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/decision")
	})
}

// reportCPU reports the thread CPU time per op since cpu0 (see threadCPU).
func reportCPU(b *testing.B, cpu0 time.Duration, ok bool) {
	cpu1, ok1 := threadCPU()
	if ok && ok1 {
		b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}
}
