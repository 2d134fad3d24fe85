package tenant

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// standingModel is the reference in floats: a tenant's share of capacity
// and of what is in flight is its weight over the weights of the tenants
// in flight or recent (itself included); recent holds the tenants with
// nothing in flight whose last request ended less than Recent ago.
func standingModel(capacity int, n, w map[string]int, recent map[string]bool, name string) Standing {
	all, live := 0, 0
	for t, wt := range w {
		all += n[t]
		if n[t] > 0 || recent[t] {
			live += wt
		}
	}
	if capacity <= 0 {
		return Even
	}
	if n[name] == 0 && !recent[name] {
		live += w[name]
	}
	frac := float64(w[name]) / float64(live)
	got := float64(n[name])
	switch {
	case got < frac*float64(all):
		return Under
	case got >= frac*float64(capacity) && got > frac*float64(all):
		return Over
	}
	return Even
}

// TestStandingAgainstModel acquires and releases random tenants' requests
// (weights 1 to 3) through Limits, on a clock that moves 0 to 3 s a step,
// and compares every tenant's Standing with the model after each step,
// with a tenant's recency lasting 10 s, and not at all.
func TestStandingAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, recency := range []time.Duration{10 * time.Second, -1} {
		for _, capacity := range []int{0, 1, 4, 9} {
			now := time.Unix(0, 0)
			l := NewLimits(LimitsConfig{Capacity: capacity, Recent: recency, Now: func() time.Time { return now }})
			tenants := []*Tenant{{Name: "a", Weight: 1}, {Name: "b", Weight: 2}, {Name: "c", Weight: 3}}
			n, w := map[string]int{}, map[string]int{}
			ended := map[string]time.Time{} // when n last fell to 0
			for _, tn := range tenants {
				w[tn.Name] = tn.Weight
			}
			recent := func() map[string]bool {
				r := map[string]bool{}
				for name, at := range ended {
					r[name] = recency > 0 && n[name] == 0 && now.Sub(at) < recency
				}
				return r
			}
			for step := 0; step < 4000; step++ {
				now = now.Add(time.Duration(rng.IntN(3001)) * time.Millisecond)
				tn := tenants[rng.IntN(len(tenants))]
				if rng.IntN(2) == 0 && n[tn.Name] > 0 {
					l.Release(tn)
					if n[tn.Name]--; n[tn.Name] == 0 {
						ended[tn.Name] = now
					}
				} else if l.Acquire(tn, "") == OK {
					n[tn.Name]++
				}
				r := recent()
				for _, o := range tenants {
					want := standingModel(capacity, n, w, r, o.Name)
					if got := l.Standing(o); got != want {
						t.Fatalf("recent %v capacity %d step %d in flight %v recent %v: %s is %v, the model says %v", recency, capacity, step, n, r, o.Name, got, want)
					}
				}
			}
			// Every tenant idle past its recency: the table is empty.
			for _, tn := range tenants {
				for n[tn.Name] > 0 {
					l.Release(tn)
					n[tn.Name]--
				}
			}
			now = now.Add(recency + time.Second)
			l.Standing(tenants[0])
			if len(l.state) != 0 || l.weightRecent != 0 || l.weightLive != 0 || len(l.recentQ) != 0 {
				t.Fatalf("recent %v capacity %d: idle tenants left %d states, weights %d live %d recent, %d queued", recency, capacity, len(l.state), l.weightLive, l.weightRecent, len(l.recentQ))
			}
		}
	}
}

// TestStandingRecent: a tenant between turns keeps the other over its
// share for Recent after its last request ends, and no longer; refusals
// count only the requests in flight.
func TestStandingRecent(t *testing.T) {
	now := time.Unix(100, 0)
	chat, rl := &Tenant{Name: "chat", Weight: 1}, &Tenant{Name: "rollout", Weight: 1}
	l := NewLimits(LimitsConfig{Capacity: 8, Now: func() time.Time { return now }})
	l.Acquire(chat, "")
	l.Release(chat) // the chat's turn ends: it is recent for DefaultRecent
	for i := range 8 {
		if r := l.Acquire(rl, ""); r != OK {
			t.Fatalf("rollout request %d beside an idle tenant: %v (an idle share is lent)", i, r)
		}
	}
	if r := l.Acquire(rl, ""); r != FairShare {
		t.Fatalf("rollout past the capacity: %v", r)
	}
	if a, b := l.Standing(chat), l.Standing(rl); a != Under || b != Over {
		t.Fatalf("chat between turns: chat %v, rollout %v", a, b)
	}
	now = now.Add(DefaultRecent - time.Millisecond)
	if s := l.Standing(rl); s != Over {
		t.Fatalf("just within the recency: rollout %v", s)
	}
	now = now.Add(time.Millisecond)
	if s := l.Standing(rl); s != Even {
		t.Fatalf("past the recency: rollout %v", s)
	}
	// A chat that comes back and leaves again is recent from its new end.
	l.Acquire(chat, "")
	now = now.Add(time.Second)
	l.Release(chat)
	now = now.Add(DefaultRecent - time.Millisecond)
	if s := l.Standing(rl); s != Over {
		t.Fatalf("recent from its second end: rollout %v", s)
	}
	// Recent < 0: an idle tenant counts for nothing.
	l = NewLimits(LimitsConfig{Capacity: 8, Recent: -1, Now: func() time.Time { return now }})
	l.Acquire(chat, "")
	l.Release(chat)
	for range 8 {
		l.Acquire(rl, "")
	}
	if s := l.Standing(rl); s != Even {
		t.Fatalf("without recency: rollout %v", s)
	}
}

// TestStanding: the cases the gateway relies on, by hand.
func TestStanding(t *testing.T) {
	chat, rl := &Tenant{Name: "chat", Weight: 1}, &Tenant{Name: "rollout", Weight: 1}
	l := NewLimits(LimitsConfig{Capacity: 8, Recent: -1})
	for range 5 {
		l.Acquire(rl, "")
	}
	if s := l.Standing(rl); s != Even {
		t.Fatalf("alone: %v", s)
	}
	if s := l.Standing(chat); s != Under {
		t.Fatalf("a tenant with nothing in flight beside a busy one: %v", s)
	}
	l.Acquire(chat, "") // 6 in flight: the rollout holds 5 of a share of 4
	if a, b := l.Standing(chat), l.Standing(rl); a != Under || b != Over {
		t.Fatalf("below capacity: chat %v, rollout %v", a, b)
	}
	l.Acquire(rl, "")
	l.Acquire(rl, "") // 8 in flight now: the rollout 7 of a share of 4
	if n := l.InFlight("rollout"); n != 7 {
		t.Fatalf("rollout: %d in flight", n)
	}
	for _, c := range []struct {
		t    *Tenant
		want Standing
	}{{chat, Under}, {rl, Over}, {nil, Even}} {
		if s := l.Standing(c.t); s != c.want {
			t.Fatalf("%v: %v, want %v", c.t, s, c.want)
		}
	}
	for range 3 {
		l.Release(rl)
	}
	for range 3 {
		l.Acquire(chat, "")
	}
	// 4 and 4: each holds its share.
	if a, b := l.Standing(chat), l.Standing(rl); a != Even || b != Even {
		t.Fatalf("even split: chat %v, rollout %v", a, b)
	}
	if fmt.Sprint(Under, Over, Even, Standing(9)) != "under over even unknown" {
		t.Fatal("names")
	}
}
