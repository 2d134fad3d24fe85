package tenant

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// standingModel is the reference in floats: a tenant's share of capacity
// and of what is in flight is its weight over the weights of the tenants
// in flight (itself included).
func standingModel(capacity int, n, w map[string]int, name string) Standing {
	all, live := 0, 0
	for t, k := range n {
		all += k
		if k > 0 {
			live += w[t]
		}
	}
	if capacity <= 0 {
		return Even
	}
	if n[name] == 0 {
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
// (weights 1 to 3) through Limits and compares every tenant's Standing
// with the model after each step.
func TestStandingAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, capacity := range []int{0, 1, 4, 9} {
		l := NewLimits(LimitsConfig{Capacity: capacity})
		tenants := []*Tenant{{Name: "a", Weight: 1}, {Name: "b", Weight: 2}, {Name: "c", Weight: 3}}
		n, w := map[string]int{}, map[string]int{}
		for _, tn := range tenants {
			w[tn.Name] = tn.Weight
		}
		for step := 0; step < 4000; step++ {
			tn := tenants[rng.IntN(len(tenants))]
			if rng.IntN(2) == 0 && n[tn.Name] > 0 {
				l.Release(tn)
				n[tn.Name]--
			} else if l.Acquire(tn, "") == OK {
				n[tn.Name]++
			}
			for _, o := range tenants {
				want := standingModel(capacity, n, w, o.Name)
				if got := l.Standing(o); got != want {
					t.Fatalf("capacity %d step %d in flight %v: %s is %v, the model says %v", capacity, step, n, o.Name, got, want)
				}
			}
		}
	}
}

// TestStanding: the cases the gateway relies on, by hand.
func TestStanding(t *testing.T) {
	chat, rl := &Tenant{Name: "chat", Weight: 1}, &Tenant{Name: "rollout", Weight: 1}
	l := NewLimits(LimitsConfig{Capacity: 8})
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
