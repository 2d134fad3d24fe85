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
	// The second ejection lasts twice the first (Envoy's growth).
	clk.Advance(59 * time.Second)
	b.Failure(clk.Now(), false) // late failure of a request in flight
	if b.State(clk.Now()) != Open {
		t.Fatal("the second opening did not last 2 × OpenFor")
	}
	clk.Advance(time.Second)
	if b.State(clk.Now()) != HalfOpen {
		t.Fatal("a failure while open extended the open period")
	}
}

// TestBreakerEjectionGrowsAndDecays: the n-th opening lasts n × OpenFor up
// to MaxOpenFor; each OpenFor spent closed takes one off the multiplier;
// TimeoutThreshold timeouts in a row open it before FailureThreshold.
func TestBreakerEjectionGrowsAndDecays(t *testing.T) {
	clk := newStepClock()
	b, _ := NewBreaker(BreakerConfig{OpenFor: time.Second, MaxOpenFor: 3 * time.Second, SuccessThreshold: 1})
	reopen := func() time.Duration {
		t.Helper()
		for range 3 {
			b.Record(clk.Now(), Outcome{Kind: Timeout})
		}
		if b.State(clk.Now()) != Open {
			t.Fatal("3 timeouts in a row did not open")
		}
		d := b.OpenUntil(clk.Now()).Sub(clk.Now())
		clk.Advance(d)
		b.Success(clk.Now()) // half-open trial closes it
		if b.State(clk.Now()) != Closed {
			t.Fatal("not closed after its trial")
		}
		return d
	}
	for i, want := range []time.Duration{1, 2, 3, 3} {
		if d := reopen(); d != want*time.Second {
			t.Fatalf("opening %d lasted %v, want %v s", i+1, d, want)
		}
	}
	if b.Multiplier() != 4 {
		t.Fatalf("multiplier %d", b.Multiplier())
	}
	clk.Advance(2 * time.Second) // two periods healthy: 4 → 2, then +1
	if d := reopen(); d != 3*time.Second {
		t.Fatalf("after decay: %v", d)
	}
	clk.Advance(time.Hour)
	if d := reopen(); d != time.Second {
		t.Fatalf("after a long healthy spell: %v", d)
	}
	// Two timeouts and a success: not open; a timeout streak broken by
	// another failure kind does not count as a timeout streak.
	b.Record(clk.Now(), Outcome{Kind: Timeout})
	b.Record(clk.Now(), Outcome{Kind: Timeout})
	b.Record(clk.Now(), Outcome{Kind: Status, Status: 500})
	b.Record(clk.Now(), Outcome{Kind: Timeout})
	if b.State(clk.Now()) != Closed {
		t.Fatal("a broken timeout streak opened the breaker")
	}
	if !b.Tripping(clk.Now(), Other) {
		t.Fatal("the fifth failure would open it")
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
	op int           // 0 success, 1 failure, 2 connect failure, 3 probe ok, 4 timeout
}

// modelState is the naive reference: it replays the whole history from
// scratch, applying the written rules one by one.
func modelState(cfg BreakerConfig, hist []modelEvent, now time.Duration) (State, uint64) {
	state, fails, touts, succs, opens, mult := Closed, 0, 0, 0, uint64(0), 0
	maxOpen := cfg.MaxOpenFor
	if maxOpen == 0 {
		maxOpen = 10 * cfg.OpenFor
	}
	maxOpen = max(maxOpen, cfg.OpenFor)
	tth := cfg.TimeoutThreshold
	if tth == 0 {
		tth = 3
	}
	tth = min(tth, cfg.FailureThreshold)
	var openedAt, openFor, closedAt time.Duration
	everClosed := false
	open := func(at time.Duration) {
		if state == Closed && everClosed {
			mult = max(0, mult-int((at-closedAt)/cfg.OpenFor))
		}
		mult++
		openFor = min(time.Duration(mult)*cfg.OpenFor, maxOpen)
		state, openedAt, fails, touts, opens = Open, at, 0, 0, opens+1
	}
	timePasses := func(t time.Duration) {
		if state == Open && t-openedAt >= openFor {
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
			fails, touts = 0, 0
		case e.op == 0 && state == HalfOpen:
			if succs++; succs == cfg.SuccessThreshold {
				state, fails, touts, succs, closedAt, everClosed = Closed, 0, 0, 0, e.at, true
			}
		case e.op != 0 && state == Closed:
			fails++
			if e.op == 4 {
				touts++
			} else {
				touts = 0
			}
			if fails >= cfg.FailureThreshold || touts >= tth || (e.op == 2 && !cfg.NoFastEject) {
				open(e.at)
			}
		case e.op != 0 && state == HalfOpen:
			open(e.at)
		}
	}
	timePasses(now)
	return state, opens
}

func TestBreakerMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 300; round++ {
		cfg := BreakerConfig{FailureThreshold: 1 + rng.IntN(6), OpenFor: time.Duration(1+rng.IntN(5)) * time.Second,
			SuccessThreshold: 1 + rng.IntN(3), NoFastEject: rng.IntN(2) == 0, TimeoutThreshold: rng.IntN(4),
			MaxOpenFor: time.Duration(rng.IntN(12)) * time.Second}
		b, err := NewBreaker(cfg)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Unix(0, 0)
		var hist []modelEvent
		var at time.Duration
		for step := 0; step < 200; step++ {
			at += time.Duration(rng.IntN(1500)) * time.Millisecond
			e := modelEvent{at: at, op: rng.IntN(5)}
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
			case 4:
				b.Record(now, Outcome{Kind: Timeout})
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
