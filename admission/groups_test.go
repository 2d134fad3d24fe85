package admission

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// groupsConfig is a door (Waits.MaxWait) with groups named by the
// program id's prefix before "/", weights and bounds from the maps.
func groupsConfig(weight, maxAdmitted map[string]int) Config {
	return Config{
		Waits: &Waits{MaxWait: 3 * time.Minute},
		Groups: &Groups{Of: func(id string) Group {
			name, _, _ := strings.Cut(id, "/")
			return Group{Name: name, Weight: weight[name], MaxAdmitted: maxAdmitted[name]}
		}},
	}
}

// groupsAdmitter is a controller with cfg (less its Groups when not
// grouped) and workers workers of capacity tokens each.
func groupsAdmitter(t *testing.T, cfg Config, grouped bool, workers int, capacity int64) *RawAdmitter {
	t.Helper()
	if !grouped {
		cfg.Groups = nil
	}
	c, err := NewRawAdmitter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for w := range workers {
		if err := c.AddWorker(WorkerID(w), capacity); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// TestGroupsNewcomerNotBehindRollout: a rollout's 40 programs fill a
// worker and wait at the door; another tenant's new session, offered
// after them, is let in at the first room, not after the rollout's 30
// waiting programs. Without Groups it waits behind them.
func TestGroupsNewcomerNotBehindRollout(t *testing.T) {
	for _, grouped := range []bool{true, false} {
		c := groupsAdmitter(t, groupsConfig(nil, nil), grouped, 1, 100_000)
		now := epoch
		first := -1 // the first rollout program to wait
		for i := range 40 {
			now = now.Add(time.Millisecond)
			a, err := c.StartRequest(now, fmt.Sprint("rl/p", i), 8_000)
			if err != nil {
				t.Fatal(err)
			}
			if !a.Run && first < 0 {
				first = i
			}
		}
		if _, err := c.StartRequest(now.Add(time.Millisecond), "chat/s", 8_000); err != nil {
			t.Fatal(err)
		}
		c.Drain(nil)
		if err := c.EndSession(now, "rl/p0"); err != nil {
			t.Fatal(err)
		}
		c.Tick(now.Add(time.Second))
		in := letIn(c.Drain(nil))
		want := "chat/s"
		if !grouped {
			want = fmt.Sprint("rl/p", first)
		}
		if first < 1 || len(in) != 1 || in[0] != want {
			t.Fatalf("grouped %v: one program ended, the door let in %v, want %s", grouped, in, want)
		}
	}
}

// TestGroupsMaxAdmitted: a group bounded to 2 admitted programs has 2
// let in of 5 offered with room for all, runs no more however long they
// wait, and lets the next in when one ends; another group is not held.
func TestGroupsMaxAdmitted(t *testing.T) {
	c := groupsAdmitter(t, groupsConfig(nil, map[string]int{"a": 2}), true, 1, 1_000_000)
	for i := range 5 {
		if _, err := c.StartRequest(epoch, fmt.Sprint("a/p", i), 1_000); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.StartRequest(epoch, "b/q", 1_000); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		c.Tick(epoch.Add(time.Duration(i) * time.Minute))
	}
	running := func() []string {
		var ids []string
		for _, p := range c.Programs(epoch, nil) {
			if p.Status == StatusRunnable {
				ids = append(ids, p.ID)
			}
		}
		slices.Sort(ids)
		return ids
	}
	if got := fmt.Sprint(running()); got != "[a/p0 a/p1 b/q]" {
		t.Fatalf("running %s, want a's first 2 and b's", got)
	}
	if err := c.EndSession(epoch.Add(time.Hour), "a/p1"); err != nil {
		t.Fatal(err)
	}
	c.Tick(epoch.Add(time.Hour))
	if got := fmt.Sprint(running()); got != "[a/p0 a/p2 b/q]" {
		t.Fatalf("after a/p1 ended: running %s", got)
	}
	if n := c.Stats().Forced; n != 0 {
		t.Fatalf("%d forced resumes past the bound", n)
	}
}

// TestGroupsDoorReference drives a door shared by three groups (random
// weights and bounds) with random offers and ends of equal-sized
// programs, and after every tick compares the programs let in, in order,
// with a naive weighted fair queue: each group's waiting programs in
// arrival order, the k-th tagged (admitted + k) / weight, the eligible
// (admitted + k ≤ bound) by tag then arrival; the door lets in a prefix
// of that order. No group is ever past its bound.
func TestGroupsDoorReference(t *testing.T) {
	lets := 0
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		names := []string{"a", "b", "c"}
		weight, bound := map[string]int{}, map[string]int{}
		for _, n := range names {
			weight[n] = 1 + rng.IntN(3)
			if rng.IntN(2) == 0 {
				bound[n] = 1 + rng.IntN(6)
			}
		}
		c := groupsAdmitter(t, groupsConfig(weight, bound), true, 1, 100_000)
		type prog struct {
			id, group string
			at        int
		}
		var waiting []prog           // at the door, in arrival order
		admitted := map[string]int{} // by group
		var running []prog
		now := epoch
		next := 0
		offer := func() {
			g := names[rng.IntN(len(names))]
			p := prog{id: fmt.Sprintf("%s/p%d", g, next), group: g, at: next}
			next++
			now = now.Add(time.Millisecond)
			a, err := c.StartRequest(now, p.id, 8_000)
			if err != nil {
				t.Fatal(err)
			}
			if a.Run {
				if len(waiting) > 0 || bound[g] > 0 && admitted[g] >= bound[g] {
					t.Fatalf("seed %d: %s admitted at once past %d waiting, %d of its group admitted", seed, p.id, len(waiting), admitted[g])
				}
				admitted[g]++
				running = append(running, p)
				return
			}
			waiting = append(waiting, p)
		}
		for range 30 {
			offer()
		}
		c.Drain(nil)
		for step := 0; step < 300; step++ {
			switch {
			case rng.IntN(3) == 0:
				offer()
				c.Drain(nil)
			case len(running) > 0:
				i := rng.IntN(len(running))
				p := running[i]
				running = slices.Delete(running, i, i+1)
				admitted[p.group]--
				now = now.Add(time.Millisecond)
				if err := c.EndSession(now, p.id); err != nil {
					t.Fatal(err)
				}
			}
			now = now.Add(time.Second)
			c.Tick(now)
			in := letIn(c.Drain(nil))
			lets += len(in)
			// The reference order.
			type tagged struct {
				p   prog
				tag float64
			}
			var order []tagged
			k := map[string]int{}
			for _, p := range waiting {
				k[p.group]++
				if bound[p.group] > 0 && admitted[p.group]+k[p.group] > bound[p.group] {
					continue
				}
				order = append(order, tagged{p, float64(admitted[p.group]+k[p.group]) / float64(weight[p.group])})
			}
			slices.SortStableFunc(order, func(a, b tagged) int { return cmp.Compare(a.tag, b.tag) })
			if len(in) > len(order) {
				t.Fatalf("seed %d step %d: let in %v, only %d eligible", seed, step, in, len(order))
			}
			for i, id := range in {
				if order[i].p.id != id {
					var want []string
					for _, o := range order[:len(in)] {
						want = append(want, o.p.id)
					}
					t.Fatalf("seed %d step %d: let in %v, the reference %v (admitted %v, weights %v, bounds %v)", seed, step, in, want, admitted, weight, bound)
				}
				p := order[i].p
				admitted[p.group]++
				running = append(running, p)
				waiting = slices.DeleteFunc(waiting, func(q prog) bool { return q.id == id })
			}
			for g, n := range admitted {
				if bound[g] > 0 && n > bound[g] {
					t.Fatalf("seed %d step %d: group %s has %d admitted, bound %d", seed, step, g, n, bound[g])
				}
			}
		}
	}
	if lets < 500 {
		t.Fatalf("the door let in only %d programs over all seeds", lets)
	}
}

// TestGroupsDoorWait measures what the groups buy a tenant's interactive
// session offered a minute after another tenant's 500-program rollout:
// four 100 K-token workers hold 40 of the rollout's 8 K-token programs,
// each running 5 to 15 minutes; the session waits at the door until the
// first room with Groups, behind the whole rollout without.
func TestGroupsDoorWait(t *testing.T) {
	wait := map[bool]time.Duration{}
	for _, grouped := range []bool{true, false} {
		c := groupsAdmitter(t, groupsConfig(nil, nil), grouped, 4, 100_000)
		rng := rand.New(rand.NewPCG(1, 2))
		ends := map[string]time.Time{} // running programs' ends
		run := func(id string, at time.Time) {
			if strings.HasPrefix(id, "rl/") {
				ends[id] = at.Add(5*time.Minute + time.Duration(rng.IntN(600))*time.Second)
			}
		}
		for i := range 500 {
			id := fmt.Sprint("rl/p", i)
			a, err := c.StartRequest(epoch, id, 8_000)
			if err != nil {
				t.Fatal(err)
			}
			if a.Run {
				run(id, epoch)
			}
		}
		if _, err := c.StartRequest(epoch.Add(time.Minute), "chat/s", 8_000); err != nil {
			t.Fatal(err)
		}
		c.Drain(nil)
		for now := epoch.Add(time.Minute); ; now = now.Add(5 * time.Second) {
			if now.Sub(epoch) > 24*time.Hour {
				t.Fatalf("grouped %v: the session never got in", grouped)
			}
			for id, end := range ends {
				if !end.After(now) {
					delete(ends, id)
					if err := c.EndSession(now, id); err != nil {
						t.Fatal(err)
					}
				}
			}
			c.Tick(now)
			in := letIn(c.Drain(nil))
			for _, id := range in {
				run(id, now)
			}
			if slices.Contains(in, "chat/s") {
				wait[grouped] = now.Sub(epoch.Add(time.Minute))
				break
			}
		}
	}
	t.Logf("the chat session's wait at the door: %v with groups, %v without", wait[true], wait[false])
	if wait[true] > 5*time.Minute || wait[false] < 10*wait[true] {
		t.Fatalf("door wait %v with groups, %v without: want the first room with groups, and the rollout's whole queue without", wait[true], wait[false])
	}
}

// TestGroupsPauseOverShareFirst: a rollout's programs grow a worker past
// the pause threshold while another tenant's small session sits between
// turns: with Groups the rollout, over its share, pauses its own
// programs; without, the smallest program, the chat session, is paused
// first.
func TestGroupsPauseOverShareFirst(t *testing.T) {
	for _, grouped := range []bool{true, false} {
		c := groupsAdmitter(t, groupsConfig(nil, nil), grouped, 1, 100_000)
		now := epoch
		ids := []string{"chat/s", "rl/p0", "rl/p1", "rl/p2", "rl/p3"}
		for _, id := range ids {
			a, err := c.StartRequest(now, id, 2_000)
			if err != nil || !a.Run {
				t.Fatalf("%s: %+v %v", id, a, err)
			}
		}
		// Every turn ends: the chat small, the rollout's grown to 24 K
		// each (98 K on a 100 K worker).
		for _, id := range ids {
			out := int64(100)
			if id != "chat/s" {
				out = 22_000
			}
			if err := c.EndRequest(now, id, 2_000, out); err != nil {
				t.Fatal(err)
			}
		}
		c.Drain(nil)
		c.Tick(now.Add(time.Second))
		var paused []string
		for _, d := range c.Drain(nil) {
			if d.Kind == KindPause {
				paused = append(paused, d.Program)
			}
		}
		if len(paused) == 0 {
			t.Fatalf("grouped %v: nothing paused over the threshold", grouped)
		}
		if chat := slices.Contains(paused, "chat/s"); chat == grouped {
			t.Fatalf("grouped %v: paused %v", grouped, paused)
		}
	}
}
