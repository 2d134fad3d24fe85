package admission

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// FuzzController decodes bytes into a sequence of operations (request
// starts, with and without a placement preference, and ends, session ends,
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
	f.Fuzz(func(t *testing.T, data []byte) {
		cfgByte := byte(0)
		if len(data) > 0 {
			cfgByte, data = data[0], data[1:]
		}
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
		c, err := NewRawAdmitter(cfg)
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
			id := fmt.Sprint("p", a%12)
			tokens := int64(b) * 37
			now = now.Add(time.Duration(op>>4) * time.Second)
			var line string
			switch op % 10 {
			case 0:
				line = "start " + id
				_, _ = c.StartRequest(now, id, tokens)
			case 1:
				line = fmt.Sprint("start ", id, " prefer ", b%4, ",", a%4)
				_, _ = c.StartRequestOn(now, id, tokens, []WorkerID{WorkerID(b % 4), WorkerID(a % 4)})
			case 2, 3:
				line = "end " + id
				_ = c.EndRequest(now, id, tokens, int64(a))
			case 4:
				line = "close " + id
				_ = c.EndSession(now, id)
			case 5:
				line = "cancel " + id
				_ = c.Cancel(now, id)
			case 6:
				line = "tick"
				c.Tick(now)
				if err := checkAfterTick(c); err != nil {
					t.Fatalf("%v\nops: %s", err, strings.Join(ops, "; "))
				}
			case 7:
				line = fmt.Sprint("add worker ", a%4)
				_ = c.AddWorker(WorkerID(a%4), int64(b)*40)
			case 8:
				switch b % 4 {
				case 0:
					line = fmt.Sprint("remove worker ", a%4)
					_ = c.RemoveWorker(now, WorkerID(a%4))
				case 1:
					line = fmt.Sprint("cap worker ", a%4)
					_ = c.SetCapacity(WorkerID(a%4), int64(b)*20)
				case 2:
					line = fmt.Sprint("backlog worker ", a%4)
					c.SetBacklog(WorkerID(a%4), int64(b)*200-10_000)
				default:
					line = fmt.Sprint("engine usage worker ", a%4)
					c.SetEngineUsage(WorkerID(a%4), int64(b)*40-1_000)
				}
			case 9:
				line = fmt.Sprint("relocate ", id, " to ", b%4, ",", a%4)
				_, _ = c.Relocate(now, id, []WorkerID{WorkerID(b % 4), WorkerID(a % 4)})
			}
			ops = append(ops, line)
			if err := checkInvariants(c); err != nil {
				t.Fatalf("%v\nops: %s", err, strings.Join(ops, "; "))
			}
			c.Drain(nil)
		}
	})
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
