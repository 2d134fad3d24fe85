package eventplane

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// watchWorkers follows the workers bucket: a presence record that is
// deleted (its relay stopped) or expires (the relay or its host died; the
// bucket's limit markers report it) removes the worker from the replica.
func (rp *Replica) watchWorkers(ctx context.Context) {
	defer rp.wg.Done()
	if rp.p.ensureLoop(ctx) != nil {
		return
	}
	known := map[uint64]WorkerInfo{}
	for ctx.Err() == nil {
		kv, err := rp.p.js.KeyValue(ctx, rp.p.names.workers)
		var w jetstream.KeyWatcher
		if err == nil {
			w, err = kv.WatchAll(ctx)
		}
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		rp.followWorkers(ctx, w, known)
		_ = w.Stop()
	}
}

func (rp *Replica) followWorkers(ctx context.Context, w jetstream.KeyWatcher, known map[uint64]WorkerInfo) {
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				continue // initial values done
			}
			id, err := strconv.ParseUint(e.Key(), 10, 64)
			if err != nil {
				continue
			}
			switch e.Operation() {
			case jetstream.KeyValuePut:
				var info WorkerInfo
				if json.Unmarshal(e.Value(), &info) != nil || info.ID != id {
					continue
				}
				if _, ok := known[id]; !ok {
					known[id] = info
					if rp.cfg.OnWorker != nil {
						rp.cfg.OnWorker(info, true)
					}
				}
			default: // deleted, purged, or expired (limit marker)
				info, ok := known[id]
				if !ok {
					info = WorkerInfo{ID: id}
				}
				delete(known, id)
				rp.workerGone(info)
			}
		}
	}
}

// workerGone removes worker info from the router (or hands it to OnWorker,
// and drops its index entries).
func (rp *Replica) workerGone(info WorkerInfo) {
	rp.log.Warn("eventplane: worker gone; removing it", "worker", info.ID)
	if rp.cfg.OnWorker != nil {
		rp.cfg.OnWorker(info, false)
		removeWorkerRanks(rp.r.Index(), info.ID)
	} else {
		rp.r.RemoveWorker(info.ID)
	}
	rp.mu.Lock()
	rp.st.WorkersGone++
	rp.mu.Unlock()
}
