package admission

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// FuzzController decodes bytes into a sequence of operations (request
// starts, with and without a placement preference and a first prefix, and
// ends, session ends,
// cancels, ticks, worker changes, relocations, with arbitrary ids, token
// counts and time steps) under configurations that switch the options on
// (decay, growth reserve with a prior and the door's share, MaxWait with
// swaps, Rebalance) and checks after each one that
// nothing panics, the bookkeeping matches a from-scratch recomputation, and
// after each tick the pause postcondition holds.
func FuzzController(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
	f.Add([]byte("\x07\x01\x00\x00\x01\x02\x00\x01\x03\x02\x05\x05\x05\x06\x06"))
	f.Add([]byte(strings.Repeat("\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99", 8)))
	// Door.Probe: two small workers, a burst of eight programs, ticks
	// past After, ends, a later turn, a cancel and a close.
	f.Add([]byte("\x21\x07\x00\x32\x07\x01\x32" +
		"\x00\x00\x28\x00\x01\x28\x00\x02\x28\x00\x03\x28\x00\x04\x28\x00\x05\x28\x00\x06\x28\x00\x07\x28" +
		"\x60\x00\x00\x02\x00\x10\x02\x05\x10\x00\x05\x28\x60\x00\x00\x05\x06\x00\x04\x07\x00\x60\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfgByte := byte(0)
		if len(data) > 0 {
			cfgByte, data = data[0], data[1:]
		}
		c, err := NewRawAdmitter(fuzzConfig(cfgByte))
		if err != nil {
			t.Fatal(err)
		}
		now := epoch
		next := func() byte {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return b
		}
		var ops []string
		for len(data) > 0 {
			op, a, b := next(), next(), next()
			now = now.Add(time.Duration(op>>4) * time.Second)
			line := fuzzOp(c, now, op, a, b)
			ops = append(ops, line)
			if line == "tick" {
				if err := checkAfterTick(c); err != nil {
					t.Fatalf("%v\nops: %s", err, strings.Join(ops, "; "))
				}
			}
			if err := checkInvariants(c); err != nil {
				t.Fatalf("%v\nops: %s", err, strings.Join(ops, "; "))
			}
			c.Drain(nil)
		}
	})
}

// fuzzConfig is FuzzController's configuration from its first byte: the
// placement, then a bit an option.
func fuzzConfig(cfgByte byte) Config {
	cfg := Config{Placement: []Placement{WorstFit, BestFitDecreasing, LeastLoaded}[int(cfgByte)%3]}
	if cfgByte&4 != 0 {
		cfg.DecayHalfLife = 7 * time.Second
	}
	if cfgByte&8 != 0 {
		cfg.ForcedResume = 40 * time.Second
	}
	if cfgByte&16 != 0 {
		cfg.ActingWeight = 0.5
	}
	if cfgByte&32 != 0 {
		cfg.Door = &Door{ColdStartPrograms: 4, ActingGrowth: 0.6}
		cfg.Waits = &Waits{ResumeOnEnd: true}
		if cfgByte&1 != 0 {
			cfg.Door.Probe = &Probe{After: 5 * time.Second, Burst: 2, Share: 0.25, Tail: 2000, Siblings: 10 * time.Second}
		}
	}
	if cfgByte&64 != 0 {
		if cfg.Waits == nil {
			cfg.Waits = &Waits{}
		}
		cfg.Waits.MaxWait, cfg.Waits.HomeFirst = 20*time.Second, true // swaps
	}
	if cfgByte&128 != 0 {
		cfg.Moves = &Moves{}
	}
	return cfg
}

// fuzzOp applies FuzzController's operation op (its low digit) with
// arguments a and b at now, and says what it did.
func fuzzOp(c *RawAdmitter, now time.Time, op, a, b byte) string {
	id := fmt.Sprint("p", a%12)
	tokens := int64(b) * 37
	switch op % 10 {
	case 0:
		_, _ = c.StartRequest(now, id, tokens)
		if b&1 != 0 { // its first prompt shares a prefix: one of three groups
			_ = c.SetFirstPrefix(id, tokens/2, uint64(a%3))
			return fmt.Sprint("start ", id, " first prefix ", a%3)
		}
		return "start " + id
	case 1:
		_, _ = c.StartRequestOn(now, id, tokens, []WorkerID{WorkerID(b % 4), WorkerID(a % 4)})
		return fmt.Sprint("start ", id, " prefer ", b%4, ",", a%4)
	case 2, 3:
		_ = c.EndRequest(now, id, tokens, int64(a))
		return "end " + id
	case 4:
		_ = c.EndSession(now, id)
		return "close " + id
	case 5:
		_ = c.Cancel(now, id)
		return "cancel " + id
	case 6:
		c.Tick(now)
		return "tick"
	case 7:
		_ = c.AddWorker(WorkerID(a%4), int64(b)*40)
		return fmt.Sprint("add worker ", a%4)
	case 8:
		return fuzzWorkerOp(c, now, WorkerID(a%4), b)
	}
	_, _ = c.Relocate(now, id, []WorkerID{WorkerID(b % 4), WorkerID(a % 4)})
	return fmt.Sprint("relocate ", id, " to ", b%4, ",", a%4)
}

// fuzzWorkerOp changes worker w as b says: removes it, or sets its
// capacity, backlog or engine usage.
func fuzzWorkerOp(c *RawAdmitter, now time.Time, w WorkerID, b byte) string {
	switch b % 4 {
	case 0:
		_ = c.RemoveWorker(now, w)
		return fmt.Sprint("remove worker ", w)
	case 1:
		_ = c.SetCapacity(w, int64(b)*20)
		return fmt.Sprint("cap worker ", w)
	case 2:
		c.SetBacklog(w, int64(b)*200-10_000)
		return fmt.Sprint("backlog worker ", w)
	}
	c.SetEngineUsage(w, int64(b)*40-1_000)
	return fmt.Sprint("engine usage worker ", w)
}

// FuzzScript runs arbitrary text through the script runner: it must never
// panic, and the only errors allowed are malformed commands, not broken
// invariants.
func FuzzScript(f *testing.F) {
	f.Add("worker add id=1 cap=1000\nstart s=a tokens=900\nend s=a prompt=990 completion=1\ntick at=5s\nstate\n")
	f.Add("config threshold=0.5 target=0.4 placement=bfd decay=1s\nworker add id=2 cap=10\nstart s=x\ntick\nnext\n")
	f.Add("start s=q tokens=10\nworker add id=1 cap=50\ntick at=31m\ncancel s=q\nclose s=q\n")
	f.Fuzz(func(t *testing.T, text string) {
		s := newScript()
		for _, line := range strings.Split(text, "\n") {
			if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") || line == "----" {
				continue
			}
			if _, err := s.run(line); err != nil && strings.Contains(err.Error(), "invariant") {
				t.Fatal(err)
			}
		}
	})
}
