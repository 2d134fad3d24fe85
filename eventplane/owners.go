package eventplane

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Program ownership: admission control is one controller's decision per
// program (which programs run, which pause at their next tool boundary),
// so a program's turns must all be admitted by one replica. Each program
// has an owner replica, recorded in the sessions bucket by compare-and-set
// (key "p.<program>"); a replica that receives a turn of a program owned
// by another live replica forwards it there (see cmd/agentkv: proxy
// --admission --nats). A program whose owner is gone (its presence record
// in the replicas bucket expired) is taken over by compare-and-set. Idle
// programs expire with the bucket's TTL.

// Owner is the replica that owns a program.
type Owner struct {
	Name string // replica name
	URL  string // where it serves (ReplicaConfig.URL)
	Self bool   // this replica
}

type ownerRecord struct {
	By  string `json:"by"`
	URL string `json:"url,omitempty"`
}

func programKey(program string) string {
	return "p." + base64.RawURLEncoding.EncodeToString([]byte(program))
}

func replicaKey(name string) string { return "r." + name }

// Owner returns the owner of program, claiming it for this replica when it
// has none or its owner is gone. With the buckets unreachable it returns
// this replica and an error wrapping ErrDegraded: the caller admits
// locally.
func (rp *Replica) Owner(ctx context.Context, program string) (Owner, error) {
	self := Owner{Name: rp.cfg.Name, URL: rp.cfg.URL, Self: true}
	c, cancel := context.WithTimeout(ctx, rp.cfg.BindTimeout)
	defer cancel()
	kv, err := rp.bind.bucket(c)
	if err != nil {
		return self, fmt.Errorf("%w: %v", ErrDegraded, err)
	}
	key := programKey(program)
	mine, _ := json.Marshal(ownerRecord{By: rp.cfg.Name, URL: rp.cfg.URL})
	// Others must see us alive before we own anything, or they would
	// take our programs over.
	if !rp.announced.Load() {
		if err := rp.putPresence(c); err != nil {
			return self, fmt.Errorf("%w: %v", ErrDegraded, err)
		}
	}
	for attempt := 0; attempt < 3; attempt++ {
		e, err := kv.Get(c, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
			if _, err := kv.Create(c, key, mine); err == nil {
				return self, nil
			} else if !isConflict(err) {
				return self, fmt.Errorf("%w: %v", ErrDegraded, err)
			}
			continue // someone claimed it first: read theirs
		case err != nil:
			return self, fmt.Errorf("%w: %v", ErrDegraded, err)
		}
		var o ownerRecord
		_ = json.Unmarshal(e.Value(), &o)
		if o.By == rp.cfg.Name {
			if time.Since(e.Created()) > rp.p.cfg.SessionTTL/4 {
				_, _ = kv.Update(c, key, mine, e.Revision())
			}
			return self, nil
		}
		if o.By != "" && rp.replicaAlive(c, o.By) {
			return Owner{Name: o.By, URL: o.URL}, nil
		}
		if _, err := kv.Update(c, key, mine, e.Revision()); err == nil {
			rp.log.Info("eventplane: took over a program whose owner is gone", "program", program, "was", o.By)
			return self, nil
		} else if !isConflict(err) {
			return self, fmt.Errorf("%w: %v", ErrDegraded, err)
		}
	}
	return self, fmt.Errorf("%w: program %q: ownership contended", ErrDegraded, program)
}

// replicaAlive reports whether replica name's presence record exists.
func (rp *Replica) replicaAlive(ctx context.Context, name string) bool {
	kv, err := rp.p.js.KeyValue(ctx, rp.p.names.replicas)
	if err != nil {
		return true // cannot tell: do not steal
	}
	_, err = kv.Get(ctx, replicaKey(name))
	return err == nil || !(errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted))
}

// putPresence writes this replica's presence record.
func (rp *Replica) putPresence(ctx context.Context) error {
	kv, err := rp.p.js.KeyValue(ctx, rp.p.names.replicas)
	if err != nil {
		return err
	}
	val, _ := json.Marshal(ownerRecord{By: rp.cfg.Name, URL: rp.cfg.URL})
	if _, err := kv.Put(ctx, replicaKey(rp.cfg.Name), val); err != nil {
		return err
	}
	rp.announced.Store(true)
	return nil
}

// announceReplica keeps this replica's presence record alive (with
// ReplicaConfig.URL) and deletes it on Close.
func (rp *Replica) announceReplica(ctx context.Context) {
	defer rp.wg.Done()
	if rp.p.ensureLoop(ctx) != nil {
		return
	}
	every := rp.p.cfg.WorkerTTL / 3
	for {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		_ = rp.putPresence(c)
		cancel()
		select {
		case <-ctx.Done():
			c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if kv, err := rp.p.js.KeyValue(c, rp.p.names.replicas); err == nil {
				_ = kv.Delete(c, replicaKey(rp.cfg.Name))
			}
			cancel()
			return
		case <-time.After(every):
		}
	}
}
