package admission

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// programFlood drives c with a new program id per request, as a client
// rotating ids does. The controller has no bound of its own: a program
// lives until its session ends, and the router ends it when the session
// table (bounded, LRU) drops the session. keep models that table: the
// program `keep` requests old is ended.
type programFlood struct {
	c    *RawAdmitter
	now  time.Time
	keep int
}

func (f *programFlood) run(t testing.TB, from, to int) {
	for i := from; i < to; i++ {
		id := "p" + strconv.Itoa(i)
		if _, err := f.c.StartRequest(f.now, id, 100); err != nil {
			t.Fatal(err)
		}
		if err := f.c.EndRequest(f.now, id, 100, 10); err != nil {
			t.Fatal(err)
		}
		if i >= f.keep {
			if err := f.c.EndSession(f.now, "p"+strconv.Itoa(i-f.keep)); err != nil {
				t.Fatal(err)
			}
		}
		if i%256 == 0 {
			f.now = f.now.Add(time.Second)
			f.c.Tick(f.now)
			f.c.Drain(nil)
		}
	}
}

// TestProgramFloodBounded: issue #22. With programs ended as their sessions
// leave a bounded table, a flood of 8x that bound of distinct program ids
// keeps the controller at the bound and its heap where one fill left it.
func TestProgramFloodBounded(t *testing.T) {
	const keep = 1 << 12
	c, err := NewRawAdmitter(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for w := range 4 {
		if err := c.AddWorker(WorkerID(w), 1<<40); err != nil {
			t.Fatal(err)
		}
	}
	f := &programFlood{c: c, now: time.Unix(0, 0), keep: keep}
	f.run(t, 0, keep)
	full := liveHeap()
	f.run(t, keep, 8*keep)
	after := liveHeap()
	t.Logf("heap after filling: %d, after 8x the bound: %d, programs %d", full, after, c.Len())
	if c.Len() != keep {
		t.Fatalf("%d programs, want %d", c.Len(), keep)
	}
	if _, ok := c.Program(f.now, "p0"); ok {
		t.Fatal("an ended program is still known")
	}
	if after > full+full/2 {
		t.Fatalf("heap grew from %d to %d", full, after)
	}
}

// BenchmarkProgramFlood: per-request cost (StartRequest, EndRequest and
// the EndSession of the program that fell out of a 65,536-session table,
// plus a Tick every 256 requests) with a new program per request, from
// below the bound to far past it.
func BenchmarkProgramFlood(b *testing.B) {
	for _, n := range []int{1_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var cpu time.Duration
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				c, _ := NewRawAdmitter(Config{})
				for w := range 4 {
					_ = c.AddWorker(WorkerID(w), 1<<40)
				}
				f := &programFlood{c: c, now: time.Unix(0, 0), keep: 1 << 16}
				b.StartTimer()
				c0 := cpuNow()
				f.run(b, 0, n)
				cpu += cpuNow() - c0
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/program")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N*n), "cpu-ns/program")
		})
	}
}

// cpuNow is threadCPU, zero where it cannot be read.
func cpuNow() time.Duration {
	d, _ := threadCPU()
	return d
}
