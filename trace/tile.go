package trace

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"
)

// TileConfig configures Tile. Copies is required; the rest default to
// zero.
type TileConfig struct {
	// Copies is how many copies of the workload to make (1..1<<20).
	Copies int
	// Stagger delays copy k's start by k*Stagger.
	Stagger time.Duration
	// Jitter adds a uniform random offset in [0, Jitter) to each copy's
	// start, drawn from Seed.
	Jitter time.Duration
	Seed   uint64
	// SharedPrefixBlocks keeps the ids of the first blocks of every prompt
	// equal across copies (a system prompt all copies share); the rest get
	// a namespace per copy. Default 0: copies share nothing.
	SharedPrefixBlocks int
}

// Tile builds a workload of cfg.Copies copies of w, to reach a target
// concurrency from a few real sessions: copy k's sessions are named
// "ID#k" (parents and WaitFor renamed alike), start k*Stagger (+ jitter)
// later (open-loop: every Arrival moves too), and have their hash ids
// remapped into a namespace of their own, so copies share no cache blocks
// except the first SharedPrefixBlocks of each prompt. Hash ids are renumbered
// densely in every copy (copy 0 included). w is not modified; the result
// shares nothing with it.
func Tile(w *Workload, cfg TileConfig) (Workload, error) {
	if cfg.Copies < 1 || cfg.Copies > 1<<20 {
		return Workload{}, fmt.Errorf("trace: tile: Copies %d out of range [1, 2^20]", cfg.Copies)
	}
	if cfg.Stagger < 0 || cfg.Jitter < 0 || cfg.SharedPrefixBlocks < 0 {
		return Workload{}, errors.New("trace: tile: Stagger, Jitter and SharedPrefixBlocks must not be negative")
	}
	if _, err := w.index(); err != nil {
		return Workload{}, err
	}
	dense := denseIDs(w)
	span := uint64(len(dense))
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x7469_6c65))
	out := Workload{Name: w.Name, BlockTokens: w.BlockTokens, OpenLoop: w.OpenLoop,
		Sessions: make([]Session, 0, len(w.Sessions)*cfg.Copies)}
	for k := range cfg.Copies {
		off := time.Duration(k) * cfg.Stagger
		if cfg.Jitter > 0 {
			off += time.Duration(rng.Int64N(int64(cfg.Jitter)))
		}
		suffix := "#" + strconv.Itoa(k)
		for _, s := range w.Sessions {
			c := s
			c.ID = s.ID + suffix
			if s.Parent != "" {
				c.Parent = s.Parent + suffix
			} else {
				c.Start += off
			}
			c.Turns = make([]Turn, len(s.Turns))
			for j, t := range s.Turns {
				n := t
				n.Arrival += off // absolute, in both loop modes
				n.HashIDs = make([]uint64, len(t.HashIDs))
				for b, id := range t.HashIDs {
					ns := uint64(k)
					if b < cfg.SharedPrefixBlocks {
						ns = 0
					}
					n.HashIDs[b] = ns*span + dense[id]
				}
				if len(t.WaitFor) > 0 {
					n.WaitFor = make([]string, len(t.WaitFor))
					for i, c := range t.WaitFor {
						n.WaitFor[i] = c + suffix
					}
				}
				n.ToolCalls = append([]string(nil), t.ToolCalls...)
				c.Turns[j] = n
			}
			out.Sessions = append(out.Sessions, c)
		}
	}
	return out, nil
}

// denseIDs numbers w's distinct hash ids in first-seen order.
func denseIDs(w *Workload) map[uint64]uint64 {
	m := make(map[uint64]uint64)
	for i := range w.Sessions {
		for j := range w.Sessions[i].Turns {
			for _, id := range w.Sessions[i].Turns[j].HashIDs {
				if _, ok := m[id]; !ok {
					m[id] = uint64(len(m))
				}
			}
		}
	}
	return m
}

// Merge combines workloads whose hash ids are local to each (Mooncake or
// Claude Code files) into one: workload i's sessions are renamed
// "NAME:ID" (NAME is its Name, or its index when names repeat) and its hash
// ids remapped into a namespace of its own. All must have the same
// BlockTokens (or none) and the same OpenLoop, else ErrBlockSize /
// ErrInvalid. For Dynamo shards of one capture, whose hashes are global,
// use ReadDynamoFiles instead.
func Merge(name string, ws ...Workload) (Workload, error) {
	out := Workload{Name: name}
	if len(ws) == 0 {
		return out, nil
	}
	out.OpenLoop = ws[0].OpenLoop
	names := map[string]int{}
	for _, w := range ws {
		names[w.Name]++
	}
	var base uint64
	for i := range ws {
		w := &ws[i]
		if _, err := w.index(); err != nil {
			return Workload{}, err
		}
		if w.BlockTokens != 0 {
			if out.BlockTokens != 0 && out.BlockTokens != w.BlockTokens {
				return Workload{}, fmt.Errorf("%w: %s has %d-token blocks, others %d", ErrBlockSize, w.Name, w.BlockTokens, out.BlockTokens)
			}
			out.BlockTokens = w.BlockTokens
		}
		if w.OpenLoop != out.OpenLoop {
			return Workload{}, fmt.Errorf("%w: cannot merge open-loop and closed-loop workloads", ErrInvalid)
		}
		prefix := w.Name
		if prefix == "" || names[prefix] > 1 {
			prefix = strconv.Itoa(i)
		}
		prefix += ":"
		dense := denseIDs(w)
		for _, s := range w.Sessions {
			c := s
			c.ID = prefix + s.ID
			if s.Parent != "" {
				c.Parent = prefix + s.Parent
			}
			c.Turns = make([]Turn, len(s.Turns))
			for j, t := range s.Turns {
				n := t
				n.HashIDs = make([]uint64, len(t.HashIDs))
				for b, id := range t.HashIDs {
					n.HashIDs[b] = base + dense[id]
				}
				if len(t.WaitFor) > 0 {
					n.WaitFor = make([]string, len(t.WaitFor))
					for k, id := range t.WaitFor {
						n.WaitFor[k] = prefix + id
					}
				}
				c.Turns[j] = n
			}
			out.Sessions = append(out.Sessions, c)
		}
		base += uint64(len(dense))
	}
	return out, nil
}
