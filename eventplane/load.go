package eventplane

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/flashindex"
)

// loadReport is one replica's own load on every worker rank it routes to,
// published on core NATS (not stored: load is only worth its latest value).
// Reports carry absolute values, so a lost or repeated one does no harm,
// and a sequence number, so a late one never overwrites a newer one.
type loadReport struct {
	_msgpack struct{}     `msgpack:",as_array"`
	Replica  string       `msgpack:"r"`
	Seq      uint64       `msgpack:"s"`
	Loads    []workerLoad `msgpack:"l"`
}

type workerLoad struct {
	_msgpack struct{} `msgpack:",as_array"`
	ID       uint64
	Rank     uint32
	Prefill  int
	Decode   int
	Requests int
}

// remoteReplica is the latest report of another replica.
type remoteReplica struct {
	seq   uint64
	seen  time.Time
	loads map[flashindex.Worker]agentkv.Load
}

// loadShare publishes this replica's own load and folds the others' into
// the router (SetRemoteLoad).
type loadShare struct {
	rp   *Replica
	wake chan struct{}

	mu      sync.Mutex // guards the fields below
	seq     uint64
	remote  map[string]*remoteReplica
	applied map[flashindex.Worker]agentkv.Load // what SetRemoteLoad holds now
	sub     *nats.Subscription
	sent    uint64
	recv    uint64

	wg     sync.WaitGroup
	cancel context.CancelFunc
}

func newLoadShare(rp *Replica) *loadShare {
	return &loadShare{rp: rp, wake: make(chan struct{}, 1), remote: map[string]*remoteReplica{},
		applied: map[flashindex.Worker]agentkv.Load{}}
}

func (ls *loadShare) start(ctx context.Context) {
	ctx, ls.cancel = context.WithCancel(ctx)
	r := ls.rp.r
	r.SetLoadObserver(func(flashindex.Worker) {
		select {
		case ls.wake <- struct{}{}:
		default:
		}
	})
	sub, err := ls.rp.p.nc.Subscribe(ls.rp.p.names.loadSubjects, ls.receive)
	if err == nil {
		ls.mu.Lock()
		ls.sub = sub
		ls.mu.Unlock()
		// The server registers a subscription asynchronously: without a
		// round trip, another replica's report published just after this
		// start (its first, or the only one for an hour) could miss this
		// replica. A failed flush costs only that; the heartbeat repairs it.
		if ferr := ls.rp.p.nc.FlushTimeout(2 * time.Second); ferr != nil {
			ls.rp.log.Warn("eventplane: load subscription flush failed", "err", ferr)
		}
	} else {
		ls.rp.log.Warn("eventplane: load subscription failed", "err", err)
	}
	ls.wg.Add(1)
	go ls.run(ctx)
}

func (ls *loadShare) stop() {
	if ls.cancel == nil {
		return
	}
	ls.cancel()
	ls.wg.Wait()
	ls.rp.r.SetLoadObserver(nil)
	ls.mu.Lock()
	if ls.sub != nil {
		_ = ls.sub.Unsubscribe()
	}
	ls.mu.Unlock()
}

// run publishes a report at once, then at every change (coalesced: one
// report covers every change since the last) and every LoadEvery, and
// expires silent replicas. The first report replaces, on every other
// replica, the load a killed predecessor of the same name left (its
// in-flight requests died with it): without it that stale load steered
// their routing for up to a LoadEvery after the restart.
func (ls *loadShare) run(ctx context.Context) {
	defer ls.wg.Done()
	every := ls.rp.cfg.LoadEvery
	t := time.NewTicker(every)
	defer t.Stop()
	subject := ls.rp.p.names.loadBase + ls.rp.cfg.Name
	for first := true; ; first = false {
		if !first {
			select {
			case <-ctx.Done():
				return
			case <-ls.wake:
			case <-t.C:
				ls.expire(time.Now().Add(-3 * every))
			}
		}
		data := ls.report()
		if err := ls.rp.p.nc.Publish(subject, data); err == nil {
			ls.mu.Lock()
			ls.sent++
			ls.mu.Unlock()
		}
	}
}

func (ls *loadShare) report() []byte {
	r := ls.rp.r
	ws := r.Workers()
	rep := loadReport{Replica: ls.rp.cfg.Name, Loads: make([]workerLoad, 0, len(ws))}
	for _, w := range ws {
		l := r.OwnLoad(w)
		if l == (agentkv.Load{}) {
			continue
		}
		rep.Loads = append(rep.Loads, workerLoad{ID: w.ID, Rank: w.DPRank, Prefill: l.PrefillTokens, Decode: l.DecodeBlocks, Requests: l.Requests})
	}
	ls.mu.Lock()
	ls.seq++
	rep.Seq = ls.seq
	ls.mu.Unlock()
	data, _ := msgpack.Marshal(&rep)
	return data
}

func (ls *loadShare) receive(m *nats.Msg) {
	var rep loadReport
	if err := msgpack.Unmarshal(m.Data, &rep); err != nil || rep.Replica == "" {
		return
	}
	if rep.Replica == ls.rp.cfg.Name {
		return
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.recv++
	rr := ls.remote[rep.Replica]
	if rr == nil {
		rr = &remoteReplica{}
		ls.remote[rep.Replica] = rr
	} else if rep.Seq <= rr.seq && rep.Seq != 1 {
		return // late; a report with Seq 1 is a restarted replica
	}
	rr.seq, rr.seen = rep.Seq, time.Now()
	rr.loads = make(map[flashindex.Worker]agentkv.Load, len(rep.Loads))
	for _, l := range rep.Loads {
		rr.loads[flashindex.Worker{ID: l.ID, DPRank: l.Rank}] = agentkv.Load{PrefillTokens: l.Prefill, DecodeBlocks: l.Decode, Requests: l.Requests}
	}
	ls.foldLocked()
}

// foldLocked sums the remote replicas' loads per worker rank and updates
// the router where the sum changed. Callers hold ls.mu (SetRemoteLoad
// takes only the router's lock and calls nothing back).
func (ls *loadShare) foldLocked() {
	sum := map[flashindex.Worker]agentkv.Load{}
	for _, rr := range ls.remote {
		for w, l := range rr.loads {
			s := sum[w]
			s.PrefillTokens += l.PrefillTokens
			s.DecodeBlocks += l.DecodeBlocks
			s.Requests += l.Requests
			sum[w] = s
		}
	}
	for w, l := range sum {
		if ls.applied[w] != l {
			ls.rp.r.SetRemoteLoad(w, l)
			ls.applied[w] = l
		}
	}
	for w := range ls.applied {
		if _, ok := sum[w]; !ok {
			ls.rp.r.SetRemoteLoad(w, agentkv.Load{})
			delete(ls.applied, w)
		}
	}
}

// expire drops replicas not heard from since cutoff (stopped, or NATS is
// down): their load no longer counts.
func (ls *loadShare) expire(cutoff time.Time) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	n := len(ls.remote)
	for name, rr := range ls.remote {
		if rr.seen.Before(cutoff) {
			delete(ls.remote, name)
		}
	}
	if len(ls.remote) != n {
		ls.foldLocked()
	}
}

// remoteRequests is the other replicas' in-flight requests, summed as
// they were last applied to the router.
func (ls *loadShare) remoteRequests() int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	n := 0
	for _, l := range ls.applied {
		n += l.Requests
	}
	return n
}

func (ls *loadShare) stats(st *ReplicaStats) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	st.LoadSent, st.LoadReceived, st.RemoteReplicas = ls.sent, ls.recv, len(ls.remote)
}
