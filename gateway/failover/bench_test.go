package failover

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkRequestPath is the tracker's work per request, on 16 workers:
// before outlier ejection (Allowed, Report) and with it (plus the
// first-byte deadline and the first-token and decode observations), with
// no worker ejected and with one ejected (its end swept on every
// Allowed). Compare with the router's own Route (tens of µs,
// BenchmarkRoute in the root package).
func BenchmarkRequestPath(b *testing.B) {
	for _, c := range []struct {
		name            string
		outlier, eject1 bool
	}{{"tracker=before", false, false}, {"tracker=outlier", true, false}, {"tracker=outlier,ejected=1", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			clk := newStepClock()
			tr, err := New(Config{Probe: ProbeConfig{Interval: -1}, Now: clk.Now, OnEject: func(uint64, bool, string) {},
				Outlier: OutlierConfig{ConfirmWait: -1}}) // these workers serve no /metrics
			if err != nil {
				b.Fatal(err)
			}
			defer tr.Close()
			for i := range 16 {
				_ = tr.Add(uint64(i), fmt.Sprintf("http://127.0.0.1:%d", 1+i))
				for range 10 {
					tr.ObserveFirstToken(uint64(i), 2000, 20*time.Millisecond)
				}
			}
			if c.eject1 {
				for range 3 {
					tr.Report(15, Outcome{Kind: Timeout})
				}
			}
			var buf [16]uint64
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				allowed := tr.Allowed(buf[:0], nil)
				id := allowed[i%len(allowed)]
				if c.outlier {
					a := tr.Send(id, Request{Prompt: 8000, Uncached: 8000, Stream: true}, nil)
					_ = a.Deadline()
					a.Received()
					a.FirstByte()
					a.Decoded(100)
					a.End()
				}
				tr.Report(id, Outcome{Kind: OK})
			}
		})
	}
}
