package eventplane

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/flashindex"
)

// BindingSource says where Route took a session's worker from.
type BindingSource uint8

const (
	// BindNone: the request has no session (or bindings are off).
	BindNone BindingSource = iota
	// BindShared: the session's binding in the shared bucket.
	BindShared
	// BindParent: the session had none; its parent's binding placed it
	// (a subagent's first turn), and the binding was created.
	BindParent
	// BindNew: the session had no binding; the router chose and the
	// binding was created (or won by compare-and-set).
	BindNew
	// BindMoved: the bound worker is gone; the router chose again and the
	// binding was moved by compare-and-set.
	BindMoved
	// BindLocal: the bucket was unreachable; the router's own session
	// table decided (degraded).
	BindLocal
)

func (s BindingSource) String() string {
	return [...]string{"none", "shared", "parent", "new", "moved", "local"}[min(int(s), 5)]
}

// binding is the value stored per session.
type binding struct {
	ID      uint64 `json:"w"`
	Rank    uint32 `json:"r"`
	Replica string `json:"by,omitempty"`
}

func (b binding) worker() flashindex.Worker { return flashindex.Worker{ID: b.ID, DPRank: b.Rank} }

type bindings struct {
	rp *Replica

	mu         sync.Mutex // guards the counters and lastWarn
	hits       uint64
	created    uint64
	moved      uint64
	conflicts  uint64
	seeded     uint64
	fallbacks  uint64
	lastWarn   time.Time
	kv         jetstream.KeyValue
	kvResolved bool
}

func newBindings(rp *Replica) *bindings { return &bindings{rp: rp} }

// sessionKey makes a session id a KV key (base64url: letters, digits, '-'
// and '_').
func sessionKey(id string) string { return "s." + base64.RawURLEncoding.EncodeToString([]byte(id)) }

func (b *bindings) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	b.mu.Lock()
	kv := b.kv
	b.mu.Unlock()
	if kv != nil {
		return kv, nil
	}
	kv, err := b.rp.p.js.KeyValue(ctx, b.rp.p.names.sessions)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.kv = kv
	b.mu.Unlock()
	return kv, nil
}

func (b *bindings) get(ctx context.Context, kv jetstream.KeyValue, id string) (binding, uint64, time.Time, bool, error) {
	e, err := kv.Get(ctx, sessionKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return binding{}, 0, time.Time{}, false, nil
	}
	if err != nil {
		return binding{}, 0, time.Time{}, false, err
	}
	var v binding
	if json.Unmarshal(e.Value(), &v) != nil {
		return binding{}, e.Revision(), time.Time{}, false, nil // garbage: overwrite by CAS
	}
	return v, e.Revision(), e.Created(), true, nil
}

// Route routes req through the replica's router with the session's
// binding taken from, and written to, the shared bucket. See RouteBinding.
func (rp *Replica) Route(ctx context.Context, req *agentkv.Request) (*agentkv.Decision, error) {
	d, _, err := rp.RouteBinding(ctx, req)
	return d, err
}

// RouteBinding routes req and says where its worker came from. A session
// bound in the bucket goes to its bound worker rank (Override.AllowedRanks)
// while that rank is one of the router's workers; a session without a
// binding is placed where its parent is bound (a subagent's first turn),
// or where the router chooses, and the binding is created with
// compare-and-set: of two replicas placing the same new session at once,
// one wins and the other re-routes the request to the winner's worker. A
// binding to a worker that is gone is moved by compare-and-set. Every turn
// keeps the binding alive for Config.SessionTTL.
//
// With the bucket unreachable (NATS down, or slower than BindTimeout) the
// router's own session table decides (the router's Config.Affinity should
// be on, so the local table mirrors the shared bindings), BindLocal is
// returned and the fallback counted and logged.
func (rp *Replica) RouteBinding(ctx context.Context, req *agentkv.Request) (*agentkv.Decision, BindingSource, error) {
	ac := req.Agent
	if rp.cfg.NoBindings || !ac.Valid() {
		d, err := rp.r.Route(ctx, req)
		return d, BindNone, err
	}
	b := rp.bind
	c, cancel := context.WithTimeout(ctx, rp.cfg.BindTimeout)
	defer cancel()
	kv, err := b.bucket(c)
	var (
		cur     binding
		rev     uint64
		created time.Time
		found   bool
	)
	if err == nil {
		cur, rev, created, found, err = b.get(c, kv, ac.SessionID)
	}
	if err != nil {
		b.fallback(err)
		d, rerr := rp.r.Route(ctx, req)
		return d, BindLocal, rerr
	}
	workers := rp.r.Workers()
	src := BindNew
	switch {
	case found && slices.Contains(workers, cur.worker()):
		src = BindShared
	case found:
		src = BindMoved
	case ac.ParentSessionID != "":
		if pb, _, _, ok, perr := b.get(c, kv, ac.ParentSessionID); perr == nil && ok && slices.Contains(workers, pb.worker()) {
			cur, src = pb, BindParent
		}
	}
	routeTo := func(w *flashindex.Worker) (*agentkv.Decision, error) {
		r := *req
		if w != nil {
			o := agentkv.Override{}
			if req.Override != nil {
				o = *req.Override
			}
			o.AllowedRanks = []flashindex.Worker{*w}
			r.Override = &o
		}
		d, err := rp.r.Route(ctx, &r)
		req.ID = r.ID
		return d, err
	}
	var pin *flashindex.Worker
	if src == BindShared || src == BindParent {
		w := cur.worker()
		pin = &w
	}
	d, err := routeTo(pin)
	if err != nil {
		return nil, src, err
	}
	val, _ := json.Marshal(binding{ID: d.Worker.ID, Rank: d.Worker.DPRank, Replica: rp.cfg.Name})
	key := sessionKey(ac.SessionID)
	switch src {
	case BindShared:
		b.count(&b.hits)
		// Renew the TTL once a quarter of it has passed.
		if time.Since(created) > rp.p.cfg.SessionTTL/4 {
			if _, err := kv.Update(c, key, val, rev); err != nil && !isConflict(err) {
				b.fallback(err)
			}
		}
		return d, src, nil
	case BindMoved:
		_, err = kv.Update(c, key, val, rev)
	default:
		_, err = kv.Create(c, key, val)
	}
	if err == nil {
		switch src {
		case BindMoved:
			b.count(&b.moved)
		case BindParent:
			b.count(&b.seeded)
		default:
			b.count(&b.created)
		}
		return d, src, nil
	}
	if !isConflict(err) {
		b.fallback(err)
		return d, BindLocal, nil
	}
	// Another replica placed the session first: follow it.
	b.count(&b.conflicts)
	win, _, _, ok, gerr := b.get(c, kv, ac.SessionID)
	if gerr != nil || !ok || win.worker() == d.Worker || !slices.Contains(workers, win.worker()) {
		return d, BindShared, nil
	}
	d.Done(agentkv.Usage{Failed: true}) // never sent
	w := win.worker()
	d, err = routeTo(&w)
	return d, BindShared, err
}

func isConflict(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

func (b *bindings) count(c *uint64) {
	b.mu.Lock()
	*c++
	b.mu.Unlock()
}

// fallback counts and (at most every 10 s) logs a binding that could not
// be read or written.
func (b *bindings) fallback(err error) {
	b.mu.Lock()
	b.fallbacks++
	warn := time.Since(b.lastWarn) > 10*time.Second
	if warn {
		b.lastWarn = time.Now()
	}
	b.mu.Unlock()
	if m := b.rp.cfg.Metrics; m != nil {
		m.bindFallbacks.Inc()
	}
	if warn {
		b.rp.log.Warn("eventplane: session bindings unreachable; routing on the local session table", "err", err)
	}
}

func (b *bindings) stats(st *ReplicaStats) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st.BindHits, st.BindCreated, st.BindMoved = b.hits, b.created, b.moved
	st.BindConflicts, st.BindSeeded, st.BindFallbacks = b.conflicts, b.seeded, b.fallbacks
}
