package failover

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestBreakerDefaults(t *testing.T) {
	clk := newStepClock()
	b, err := NewBreaker(BreakerConfig{NoFastEject: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		b.Failure(clk.Now(), true)
		if b.State(clk.Now()) != Closed {
			t.Fatalf("open after %d failures, want 5", i+1)
		}
	}
	b.Success(clk.Now()) // resets the count
	for i := 0; i < 5; i++ {
		b.Failure(clk.Now(), false)
	}
	if s := b.State(clk.Now()); s != Open || b.Allow(clk.Now()) {
		t.Fatalf("after 5 failures: %v", s)
	}
	clk.Advance(30*time.Second - time.Nanosecond)
	if s := b.State(clk.Now()); s != Open {
		t.Fatalf("before 30 s: %v", s)
	}
	clk.Advance(time.Nanosecond)
	if s := b.State(clk.Now()); s != HalfOpen || !b.Allow(clk.Now()) {
		t.Fatalf("at 30 s: %v", s)
	}
	b.Success(clk.Now())
	if s := b.State(clk.Now()); s != HalfOpen {
		t.Fatalf("after one half-open success: %v", s)
	}
	b.Success(clk.Now())
	if s := b.State(clk.Now()); s != Closed {
		t.Fatalf("after two half-open successes: %v", s)
	}
	if b.Opens() != 1 {
		t.Fatalf("opens %d", b.Opens())
	}
}

func TestBreakerFastEjectAndHalfOpenFailure(t *testing.T) {
	clk := newStepClock()
	b, _ := NewBreaker(BreakerConfig{})
	b.Failure(clk.Now(), true) // connection refused
	if b.State(clk.Now()) != Open {
		t.Fatal("a connect failure did not eject at once")
	}
	b.ProbeOK(clk.Now())
	if b.State(clk.Now()) != HalfOpen {
		t.Fatal("a probe success did not half-open")
	}
	b.Failure(clk.Now(), false)
	if b.State(clk.Now()) != Open {
		t.Fatal("a half-open failure did not reopen")
	}
	clk.Advance(29 * time.Second)
	b.Failure(clk.Now(), false) // late failure of a request in flight
	clk.Advance(time.Second)
	if b.State(clk.Now()) != HalfOpen {
		t.Fatal("a failure while open extended the open period")
	}
}

func TestBreakerRecord(t *testing.T) {
	clk := newStepClock()
	b, _ := NewBreaker(BreakerConfig{FailureThreshold: 2})
	b.Record(clk.Now(), Outcome{Kind: ClientGone})
	b.Record(clk.Now(), Outcome{Kind: Status, Status: 429})
	b.Record(clk.Now(), Outcome{Kind: Status, Status: 503})
	if b.State(clk.Now()) != Closed {
		t.Fatal("429 counted against the worker")
	}
	b.Record(clk.Now(), Outcome{Kind: Cut, Started: true})
	if b.State(clk.Now()) != Open {
		t.Fatal("503 then a cut stream did not open a threshold-2 breaker")
	}
}

func TestBreakerConfigErrors(t *testing.T) {
	for _, c := range []BreakerConfig{{FailureThreshold: -1}, {OpenFor: -1}, {SuccessThreshold: -1}} {
		if _, err := NewBreaker(c); err == nil {
			t.Errorf("NewBreaker(%+v) accepted", c)
		}
	}
}

// modelEvent is one input to the breaker in the property test.
type modelEvent struct {
	at time.Duration // since the start
	op int           // 0 success, 1 failure, 2 connect failure, 3 probe ok
}

// modelState is the naive reference: it replays the whole history from
// scratch, applying the written rules one by one.
func modelState(cfg BreakerConfig, hist []modelEvent, now time.Duration) (State, uint64) {
	state, fails, succs, opens := Closed, 0, 0, uint64(0)
	var openedAt time.Duration
	timePasses := func(t time.Duration) {
		if state == Open && t-openedAt >= cfg.OpenFor {
			state, succs = HalfOpen, 0
		}
	}
	for _, e := range hist {
		timePasses(e.at)
		switch {
		case e.op == 3:
			if state == Open {
				state, succs = HalfOpen, 0
			}
		case e.op == 0 && state == Closed:
			fails = 0
		case e.op == 0 && state == HalfOpen:
			if succs++; succs == cfg.SuccessThreshold {
				state, fails, succs = Closed, 0, 0
			}
		case e.op != 0 && state == Closed:
			fails++
			if fails == cfg.FailureThreshold || (e.op == 2 && !cfg.NoFastEject) {
				state, openedAt, fails, opens = Open, e.at, 0, opens+1
			}
		case e.op != 0 && state == HalfOpen:
			state, openedAt, opens = Open, e.at, opens+1
		}
	}
	timePasses(now)
	return state, opens
}

func TestBreakerMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 300; round++ {
		cfg := BreakerConfig{FailureThreshold: 1 + rng.IntN(6), OpenFor: time.Duration(1+rng.IntN(5)) * time.Second,
			SuccessThreshold: 1 + rng.IntN(3), NoFastEject: rng.IntN(2) == 0}
		b, err := NewBreaker(cfg)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Unix(0, 0)
		var hist []modelEvent
		var at time.Duration
		for step := 0; step < 200; step++ {
			at += time.Duration(rng.IntN(1500)) * time.Millisecond
			e := modelEvent{at: at, op: rng.IntN(4)}
			if rng.IntN(3) == 0 {
				e.op = 1 // failures are common in a sick fleet
			}
			hist = append(hist, e)
			now := start.Add(at)
			switch e.op {
			case 0:
				b.Success(now)
			case 1, 2:
				b.Failure(now, e.op == 2)
			case 3:
				b.ProbeOK(now)
			}
			query := at + time.Duration(rng.IntN(2000))*time.Millisecond
			want, wantOpens := modelState(cfg, hist, query)
			// Querying must not change what later events see, so query a
			// time that is never in the past of the next event: the next
			// event comes at least at query.
			if got := b.State(start.Add(query)); got != want || b.Opens() != wantOpens {
				t.Fatalf("round %d step %d (cfg %+v): state %v opens %d, model %v %d", round, step, cfg, got,
					b.Opens(), want, wantOpens)
			}
			at = query
		}
	}
}
