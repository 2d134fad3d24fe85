package failover

import (
	"context"
	"errors"
	"testing"
	"time"
)

// recordAfter is an After that fires at once and records the waits asked.
type recordAfter struct{ waits []time.Duration }

func (r *recordAfter) After(d time.Duration) <-chan time.Time {
	r.waits = append(r.waits, d)
	ch := make(chan time.Time, 1)
	ch <- time.Time{}
	return ch
}

func TestBackoffDefaults(t *testing.T) {
	r, err := NewRetry(RetryConfig{Seed: 7}, nil)
	if err != nil {
		t.Fatal(err)
	}
	base := 50 * time.Millisecond
	for n := 1; n <= 4; n++ {
		for k := 0; k < 200; k++ {
			d := r.Backoff(n)
			lo, hi := time.Duration(float64(base)*0.8), time.Duration(float64(base)*1.2)
			if d < lo || d > hi {
				t.Fatalf("Backoff(%d) = %v, want in [%v, %v]", n, d, lo, hi)
			}
		}
		base = time.Duration(float64(base) * 1.5)
	}
	nj, _ := NewRetry(RetryConfig{Jitter: -1, MaxBackoff: 100 * time.Millisecond}, nil)
	for n, want := range map[int]time.Duration{1: 50 * time.Millisecond, 2: 75 * time.Millisecond, 3: 100 * time.Millisecond, 30: 100 * time.Millisecond} {
		if got := nj.Backoff(n); got != want {
			t.Errorf("no jitter: Backoff(%d) = %v, want %v", n, got, want)
		}
	}
}

func TestRetryDo(t *testing.T) {
	var ra recordAfter
	r, _ := NewRetry(RetryConfig{Jitter: -1}, ra.After)
	tries := 0
	err := r.Do(context.Background(), func(ctx context.Context, try int) bool {
		tries++
		if try != tries {
			t.Fatalf("try %d, want %d", try, tries)
		}
		return true
	})
	if !errors.Is(err, ErrTriesExhausted) || tries != 5 {
		t.Fatalf("always failing: err %v after %d tries, want ErrTriesExhausted after 5", err, tries)
	}
	want := []time.Duration{50 * time.Millisecond, 75 * time.Millisecond, 112500 * time.Microsecond, 168750 * time.Microsecond}
	if len(ra.waits) != len(want) {
		t.Fatalf("waits %v, want %v", ra.waits, want)
	}
	for i := range want {
		if ra.waits[i] != want[i] {
			t.Fatalf("waits %v, want %v", ra.waits, want)
		}
	}

	tries = 0
	err = r.Do(context.Background(), func(ctx context.Context, try int) bool { tries++; return try < 3 })
	if err != nil || tries != 3 {
		t.Fatalf("success at try 3: err %v tries %d", err, tries)
	}

	ctx, cancel := context.WithCancel(context.Background())
	tries = 0
	err = r.Do(ctx, func(ctx context.Context, try int) bool { tries++; cancel(); return true })
	if !errors.Is(err, context.Canceled) || tries != 1 {
		t.Fatalf("cancelled: err %v tries %d", err, tries)
	}

	one, _ := NewRetry(RetryConfig{MaxTries: 1}, nil)
	tries = 0
	if err := one.Do(context.Background(), func(context.Context, int) bool { tries++; return true }); !errors.Is(err, ErrTriesExhausted) || tries != 1 {
		t.Fatalf("MaxTries 1: err %v tries %d", err, tries)
	}
}

func TestRetryConfigErrors(t *testing.T) {
	for _, c := range []RetryConfig{{MaxTries: -1}, {InitialBackoff: -1}, {Multiplier: 0.5}, {Jitter: 1}} {
		if _, err := NewRetry(c, nil); !errors.Is(err, ErrConfig) {
			t.Errorf("NewRetry(%+v): %v", c, err)
		}
	}
}
