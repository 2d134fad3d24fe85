package tenant

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// gateModel is the naive reference: per worker, counts and a FIFO of
// waiter ids; after every change, grant waiters from the head while no
// protected request awaits its first token and fewer than slots yielding
// ones do.
type gateModel struct {
	slots     int
	protected map[uint64]int
	yielding  map[uint64]int
	queue     map[uint64][]int
}

func (m *gateModel) settle(w uint64) (granted []int) {
	for len(m.queue[w]) > 0 && m.protected[w] == 0 && m.yielding[w] < m.slots {
		granted = append(granted, m.queue[w][0])
		m.queue[w] = m.queue[w][1:]
		m.yielding[w]++
	}
	return granted
}

// TestGateAgainstModel drives a Gate and the model with the same random
// operations (protect, yield, a ticket given back) on 3 workers, and
// checks after each that the same waiters were let through and the
// counts agree. MaxHold is long: no waiter is forced.
func TestGateAgainstModel(t *testing.T) {
	for _, slots := range []int{1, 2} {
		g := NewGate(GateConfig{MaxHold: time.Hour, Slots: slots})
		m := &gateModel{slots: slots, protected: map[uint64]int{}, yielding: map[uint64]int{}, queue: map[uint64][]int{}}
		rng := rand.New(rand.NewPCG(1, uint64(slots)))
		type held struct {
			id int
			w  uint64
			tk Ticket
		}
		var live []held
		through := make(chan held, 1000)
		waiting := map[int]bool{}
		next := 0
		for op := 0; op < 3000; op++ {
			w := uint64(rng.IntN(3))
			var want []int
			switch k := rng.IntN(10); {
			case k < 3:
				live = append(live, held{id: -1, w: w, tk: g.Protect(w)})
				m.protected[w]++
			case k < 6:
				id := next
				next++
				if len(m.queue[w]) == 0 && m.protected[w] == 0 && m.yielding[w] < slots {
					m.yielding[w]++
					want = []int{id}
				} else {
					m.queue[w] = append(m.queue[w], id)
					waiting[id] = true
				}
				go func() {
					tk, _, forced, err := g.Yield(context.Background(), w)
					if err != nil || forced {
						t.Errorf("yield %d: %v forced %v", id, err, forced)
					}
					through <- held{id: id, w: w, tk: tk}
				}()
				if want == nil { // wait until it is queued
					for {
						n, _, _ := g.Waiting(w)
						if n == len(m.queue[w]) {
							break
						}
						time.Sleep(50 * time.Microsecond)
					}
				}
			default:
				if len(live) == 0 {
					continue
				}
				i := rng.IntN(len(live))
				h := live[i]
				live = slices.Delete(live, i, i+1)
				h.tk.Done()
				h.tk.Done() // idempotent
				if h.id < 0 {
					m.protected[h.w]--
				} else {
					m.yielding[h.w]--
				}
				want = m.settle(h.w)
			}
			var got []int
			for range want {
				h := <-through
				got = append(got, h.id)
				delete(waiting, h.id)
				live = append(live, h)
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("slots %d op %d: let through %v, the model %v", slots, op, got, want)
			}
			for w := uint64(0); w < 3; w++ {
				n, y, p := g.Waiting(w)
				if n != len(m.queue[w]) || y != m.yielding[w] || p != m.protected[w] {
					t.Fatalf("slots %d op %d worker %d: gate (%d waiting, %d yielding, %d protected), model (%d, %d, %d)",
						slots, op, w, n, y, p, len(m.queue[w]), m.yielding[w], m.protected[w])
				}
			}
		}
		for len(live) > 0 || len(waiting) > 0 { // drain
			for _, h := range live {
				h.tk.Done()
				if h.id < 0 {
					m.protected[h.w]--
				} else {
					m.yielding[h.w]--
				}
			}
			live = live[:0]
			for w := uint64(0); w < 3; w++ {
				for range m.settle(w) {
					h := <-through
					delete(waiting, h.id)
					live = append(live, h)
				}
			}
		}
		if len(g.lanes) != 0 {
			t.Fatalf("slots %d: %d lanes left", slots, len(g.lanes))
		}
	}
}

// TestGateHoldAndCancel: a yielding request is sent after MaxHold even if
// its worker never clears (forced), and one whose client leaves holds
// nothing and lets the next waiter on.
func TestGateHoldAndCancel(t *testing.T) {
	g := NewGate(GateConfig{MaxHold: 20 * time.Millisecond})
	p := g.Protect(7)
	tk, waited, forced, err := g.Yield(context.Background(), 7)
	if err != nil || !forced || waited < 20*time.Millisecond {
		t.Fatalf("held past MaxHold: waited %v forced %v err %v", waited, forced, err)
	}
	tk.Done()
	p.Done()

	g = NewGate(GateConfig{MaxHold: time.Hour})
	first, _, _, _ := g.Yield(context.Background(), 1) // clear: sent at once
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		_, _, _, err := g.Yield(ctx, 1)
		gone <- err
	}()
	for n, _, _ := g.Waiting(1); n != 1; n, _, _ = g.Waiting(1) {
		time.Sleep(100 * time.Microsecond)
	}
	next := make(chan Ticket, 1)
	go func() {
		tk, _, _, _ := g.Yield(context.Background(), 1)
		next <- tk
	}()
	for n, _, _ := g.Waiting(1); n != 2; n, _, _ = g.Waiting(1) {
		time.Sleep(100 * time.Microsecond)
	}
	cancel()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait: %v", err)
	}
	first.Done()
	tk = <-next // the cancelled waiter held nothing: the next one goes
	if n, y, _ := g.Waiting(1); n != 0 || y != 1 {
		t.Fatalf("after the hand-on: %d waiting, %d yielding", n, y)
	}
	tk.Done()
	if len(g.lanes) != 0 {
		t.Fatal("an idle lane was kept")
	}
	var zero Ticket
	zero.Done()
	var nilTk *Ticket
	nilTk.Done()
}
