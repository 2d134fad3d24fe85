package failover_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/agentkv/agentkv/gateway/failover"
)

func Example() {
	now := time.Unix(0, 0)
	tr, err := failover.New(failover.Config{
		Probe: failover.ProbeConfig{Interval: -1}, // probes off: workers are up
		Now:   func() time.Time { return now },
	})
	if err != nil {
		panic(err)
	}
	defer tr.Close()
	_ = tr.Add(0, "http://127.0.0.1:8001")
	_ = tr.Add(1, "http://127.0.0.1:8002")

	// Worker 0 refused a connection: it leaves routing at once, and the
	// request is retried on what is left.
	o := failover.Outcome{Kind: failover.Connect, Err: errors.New("connection refused")}
	tr.Report(0, o)
	fmt.Println("retry:", o.Retryable(), "on", tr.Allowed(nil, []uint64{0}))

	// 30 s later its breaker half-opens; two good replies close it.
	now = now.Add(30 * time.Second)
	fmt.Println(tr.Status()[0].Breaker, tr.Allowed(nil, nil))
	tr.Report(0, failover.Outcome{Kind: failover.OK, Status: 200})
	tr.Report(0, failover.Outcome{Kind: failover.OK, Status: 200})
	fmt.Println(tr.Status()[0].Breaker)
	// Output:
	// retry: true on [1]
	// half-open [0 1]
	// closed
}
