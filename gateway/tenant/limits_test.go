package tenant

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// ref is the naive model of Limits: lists, recomputed sums.
type ref struct {
	capacity int
	idle     time.Duration
	inFlight map[string]int
	sessions map[string]map[string]time.Time
	weights  map[string]int
}

func (r *ref) acquire(t *Tenant, s string, now time.Time) Refusal {
	if t.MaxInFlight > 0 && r.inFlight[t.Name] >= t.MaxInFlight {
		return InFlight
	}
	total, live := 0, 0
	for n, c := range r.inFlight {
		total += c
		if c > 0 && n != t.Name {
			live += r.weights[n]
		}
	}
	live += t.Weight
	if r.capacity > 0 && total >= r.capacity && float64(r.inFlight[t.Name]) >= float64(r.capacity)*float64(t.Weight)/float64(live) {
		return FairShare
	}
	if t.MaxSessions > 0 && s != "" {
		m := r.sessions[t.Name]
		// A session idle past SessionIdle has ended: it counts as new.
		if seen, ok := m[s]; !ok || now.Sub(seen) >= r.idle {
			n := 0
			for _, seen := range m {
				if now.Sub(seen) < r.idle {
					n++
				}
			}
			if n >= t.MaxSessions {
				return Sessions
			}
		}
		if m == nil {
			m = map[string]time.Time{}
			r.sessions[t.Name] = m
		}
		m[s] = now
	}
	r.inFlight[t.Name]++
	r.weights[t.Name] = t.Weight
	return OK
}

func TestLimitsAgainstReference(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		now := time.Unix(0, 0)
		tenants := []*Tenant{
			{Name: "a", Weight: 1 + rng.IntN(3), MaxInFlight: rng.IntN(6)},
			{Name: "b", Weight: 1 + rng.IntN(3), MaxSessions: rng.IntN(4)},
			{Name: "c", Weight: 1},
		}
		capacity := rng.IntN(10)
		l := NewLimits(LimitsConfig{Capacity: capacity, SessionIdle: time.Minute, Now: func() time.Time { return now }})
		r := &ref{capacity: capacity, idle: time.Minute, inFlight: map[string]int{},
			sessions: map[string]map[string]time.Time{}, weights: map[string]int{}}
		var held []*Tenant
		for step := 0; step < 2000; step++ {
			now = now.Add(time.Duration(rng.IntN(5000)) * time.Millisecond)
			switch op := rng.IntN(10); {
			case op < 5:
				tn := tenants[rng.IntN(len(tenants))]
				s := ""
				if rng.IntN(3) > 0 {
					s = tn.Name + "/" + string(rune('a'+rng.IntN(8)))
				}
				got, want := l.Acquire(tn, s), r.acquire(tn, s, now)
				if got != want {
					t.Fatalf("seed %d step %d: Acquire(%s, %q) = %v, reference %v (in flight %v)", seed, step, tn.Name, s, got, want, r.inFlight)
				}
				if got == OK {
					held = append(held, tn)
				}
			case op < 9 && len(held) > 0:
				i := rng.IntN(len(held))
				tn := held[i]
				held = append(held[:i], held[i+1:]...)
				l.Release(tn)
				r.inFlight[tn.Name]--
			default:
				tn := tenants[rng.IntN(len(tenants))]
				s := tn.Name + "/" + string(rune('a'+rng.IntN(8)))
				l.EndSession(tn, s)
				delete(r.sessions[tn.Name], s)
			}
			for _, tn := range tenants {
				if l.InFlight(tn.Name) != r.inFlight[tn.Name] {
					t.Fatalf("seed %d step %d: %s in flight %d, reference %d", seed, step, tn.Name, l.InFlight(tn.Name), r.inFlight[tn.Name])
				}
			}
		}
	}
}

// TestFairShareLetsTheSmallTenantIn: a tenant filling the engines does not
// keep a second tenant out.
func TestFairShareLetsTheSmallTenantIn(t *testing.T) {
	l := NewLimits(LimitsConfig{Capacity: 8})
	big, small := &Tenant{Name: "rollout", Weight: 1}, &Tenant{Name: "chat", Weight: 1}
	n := 0
	for l.Acquire(big, "") == OK {
		n++
	}
	if n != 8 {
		t.Fatalf("the only tenant got %d of capacity 8", n)
	}
	if r := l.Acquire(small, ""); r != OK {
		t.Fatalf("the second tenant was refused (%v) while the first held everything", r)
	}
	if r := l.Acquire(big, ""); r != FairShare {
		t.Fatalf("the big tenant past its share: %v, want FairShare", r)
	}
	for i := 0; i < 4; i++ {
		l.Release(big)
	}
	if r := l.Acquire(small, ""); r != OK {
		t.Fatalf("the small tenant under its share: %v", r)
	}
}

func TestLimitsSessionsExpire(t *testing.T) {
	now := time.Unix(0, 0)
	l := NewLimits(LimitsConfig{SessionIdle: time.Minute, Now: func() time.Time { return now }})
	tn := &Tenant{Name: "b", MaxSessions: 2}
	for _, s := range []string{"b/1", "b/2"} {
		if l.Acquire(tn, s) != OK {
			t.Fatal("refused under the limit")
		}
		l.Release(tn)
	}
	if l.Acquire(tn, "b/3") != Sessions {
		t.Fatal("third session let in")
	}
	if l.Acquire(tn, "b/1") != OK {
		t.Fatal("a known session refused")
	}
	l.Release(tn)
	l.EndSession(tn, "b/2")
	if l.Acquire(tn, "b/3") != OK {
		t.Fatal("an ended session still counts")
	}
	l.Release(tn)
	if l.Acquire(tn, "b/4") != Sessions {
		t.Fatal("fourth session let in")
	}
	now = now.Add(time.Minute)
	if l.Acquire(tn, "b/4") != OK {
		t.Fatal("idle sessions still count after SessionIdle")
	}
}

func TestLimitsConcurrent(t *testing.T) {
	l := NewLimits(LimitsConfig{Capacity: 16})
	ts := []*Tenant{{Name: "a", Weight: 1, MaxInFlight: 5}, {Name: "b", Weight: 3}}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			tn := ts[g%2]
			for i := 0; i < 500; i++ {
				if l.Acquire(tn, "") == OK {
					if tn.MaxInFlight > 0 && l.InFlight(tn.Name) > tn.MaxInFlight {
						t.Errorf("%s over its limit", tn.Name)
					}
					l.Release(tn)
				}
			}
		}(g)
	}
	wg.Wait()
	l.mu.Lock()
	l.expire(time.Now().Add(DefaultRecent)) // past the tenants' recency
	left := len(l.state)
	l.mu.Unlock()
	if l.InFlight("a")+l.InFlight("b") != 0 || left != 0 {
		t.Fatalf("state left after every release: %v", l.state)
	}
}
