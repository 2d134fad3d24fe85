package kvhint

import (
	"sync"
	"time"
)

// Renewals is a router's memory of the lease renewals it sent (a pin's, for
// one), so that policies renew a lease when it has run down a little and
// not on every turn that would. One Renewals belongs to one router (the
// leases are that router's); it is safe for concurrent use and holds at
// most MaxRenewals entries, past which it forgets (which costs only
// renewals sent early). A nil *Renewals remembers nothing: every renewal
// is due.
type Renewals struct {
	mu sync.Mutex
	m  map[RenewalKey]time.Time
}

// RenewalKey names a lease: an action kind on a worker over a prefix of
// Blocks blocks ending in Last (a sequence hash, which names the whole
// prefix).
type RenewalKey struct {
	Kind   Kind
	Worker WorkerID
	Last   uint64
	Blocks int
}

// MaxRenewals bounds a Renewals.
const MaxRenewals = 4096

// NewRenewals returns an empty memory of renewals.
func NewRenewals() *Renewals { return &Renewals{m: map[RenewalKey]time.Time{}} }

// Due reports whether the lease k should be renewed at now: when it was
// not renewed within the last every, when the worker does not hold what it
// covers (held false: a renewal it could not take does not count), and
// always without a clock (now zero) or a memory (r nil). A due renewal of
// a held lease is remembered as sent at now.
func (r *Renewals) Due(k RenewalKey, now time.Time, every time.Duration, held bool) bool {
	if r == nil || now.IsZero() {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !held {
		delete(r.m, k)
		return true
	}
	if at, ok := r.m[k]; ok && !now.Before(at) && now.Sub(at) < every {
		return false
	}
	if len(r.m) >= MaxRenewals {
		for old, at := range r.m {
			if now.Before(at) || now.Sub(at) >= every {
				delete(r.m, old)
			}
		}
		if len(r.m) >= MaxRenewals {
			clear(r.m)
		}
	}
	r.m[k] = now
	return true
}

// Len returns how many renewals r remembers.
func (r *Renewals) Len() int {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}
