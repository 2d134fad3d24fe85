package sim

import "github.com/agentkv/agentkv/flashindex"

// EventSink receives an engine's KV cache events, in order, as a real
// engine's events reach the router (a flashindex.Index, an adapter, a
// test recorder). The engine reuses the event and its slices after Apply
// returns: a sink must copy what it keeps. An error from Apply stops the
// step and is returned by Engine.Step.
type EventSink interface {
	Apply(ev *flashindex.Event) error
}

// EventSinkFunc adapts a function to EventSink.
type EventSinkFunc func(ev *flashindex.Event) error

// Apply calls f(ev).
func (f EventSinkFunc) Apply(ev *flashindex.Event) error { return f(ev) }

// emitter builds events and hands them to the sink, merging consecutive
// operations into one event where the merged event means the same: removals
// from one tier, and stores that extend one chain on one tier. Order is
// preserved exactly.
type emitter struct {
	sink      EventSink
	worker    flashindex.Worker
	blockSize int
	ev        flashindex.Event
	open      bool
	nextID    uint64
	events    int64
	err       error
}

func (m *emitter) stored(tier flashindex.Tier, parent uint64, hasParent bool, hash, local uint64) {
	if m.sink == nil {
		return
	}
	if m.open && m.ev.Kind == flashindex.Stored && m.ev.Tier == tier && hasParent &&
		len(m.ev.Blocks) > 0 && m.ev.Blocks[len(m.ev.Blocks)-1].EngineHash == parent {
		m.ev.Blocks = append(m.ev.Blocks, flashindex.StoredBlock{EngineHash: hash, LocalHash: local, HasLocalHash: true})
		return
	}
	m.flush()
	m.open = true
	m.ev.Kind = flashindex.Stored
	m.ev.Tier = tier
	m.ev.Parent, m.ev.HasParent = parent, hasParent
	m.ev.Blocks = append(m.ev.Blocks[:0], flashindex.StoredBlock{EngineHash: hash, LocalHash: local, HasLocalHash: true})
	m.ev.Hashes = m.ev.Hashes[:0]
}

func (m *emitter) removed(tier flashindex.Tier, hash uint64) {
	if m.sink == nil {
		return
	}
	if m.open && m.ev.Kind == flashindex.Removed && m.ev.Tier == tier {
		m.ev.Hashes = append(m.ev.Hashes, hash)
		return
	}
	m.flush()
	m.open = true
	m.ev.Kind = flashindex.Removed
	m.ev.Tier = tier
	m.ev.Parent, m.ev.HasParent = 0, false
	m.ev.Blocks = m.ev.Blocks[:0]
	m.ev.Hashes = append(m.ev.Hashes[:0], hash)
}

// flush hands the open event to the sink. After a sink error the engine
// keeps its state and drops further events; Step returns the first error.
func (m *emitter) flush() {
	if !m.open {
		return
	}
	m.open = false
	m.ev.Worker = m.worker
	m.ev.EventID = m.nextID
	m.ev.BlockSize = m.blockSize
	m.nextID++
	m.events++
	if m.err != nil {
		return
	}
	if err := m.sink.Apply(&m.ev); err != nil {
		m.err = err
	}
}
