package tenant

import (
	"sync"
	"time"
)

// DefaultSessionIdle is how long a session counts against its tenant's
// MaxSessions after its last request when it does not end explicitly.
const DefaultSessionIdle = 30 * time.Minute

// Refusal says why Limits refused a request.
type Refusal int

// Refusals.
const (
	OK        Refusal = iota
	InFlight          // the tenant has MaxInFlight requests in flight
	Sessions          // the request would open a session past MaxSessions
	FairShare         // the engines are contended and the tenant is past its weighted share
)

// String returns the refusal's metric label.
func (r Refusal) String() string {
	switch r {
	case OK:
		return "ok"
	case InFlight:
		return "tenant_in_flight"
	case Sessions:
		return "tenant_sessions"
	case FairShare:
		return "tenant_fair_share"
	}
	return "unknown"
}

// LimitsConfig configures NewLimits. Zero fields mean the defaults.
type LimitsConfig struct {
	// Capacity is the requests in flight the engines serve, all tenants
	// together, before they count as contended (0: never contended, so no
	// FairShare refusals). Once contended, a tenant holding more than
	// Capacity·weight/Σweights (Σ over the tenants with requests in
	// flight, itself included) gets FairShare until it is back under.
	Capacity int
	// SessionIdle: see DefaultSessionIdle.
	SessionIdle time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Limits enforces each tenant's MaxInFlight and MaxSessions and, when the
// engines are contended, the weighted share between tenants. Safe for
// concurrent use; every method is O(1) amortised.
type Limits struct {
	cfg LimitsConfig

	mu sync.Mutex // guards everything below
	// state per tenant name; a tenant with nothing in flight and no
	// session is deleted, so the map holds only active tenants.
	state      map[string]*usage
	inFlight   int // all tenants
	weightLive int // Σ weight over tenants with requests in flight
}

type usage struct {
	weight   int
	inFlight int
	sessions map[string]time.Time // scoped id → last request
}

// NewLimits returns Limits with cfg's defaults filled.
func NewLimits(cfg LimitsConfig) *Limits {
	if cfg.SessionIdle <= 0 {
		cfg.SessionIdle = DefaultSessionIdle
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Limits{cfg: cfg, state: map[string]*usage{}}
}

// Acquire counts a request of tenant t in session (a scoped id, "" for
// none) or refuses it. On OK the caller must call Release(t) exactly once
// when the request ends. A nil t (no keys configured) is always OK.
func (l *Limits) Acquire(t *Tenant, session string) Refusal {
	if t == nil {
		return OK
	}
	now := l.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.state[t.Name]
	if u == nil {
		u = &usage{weight: t.Weight}
		l.state[t.Name] = u
	}
	if t.MaxInFlight > 0 && u.inFlight >= t.MaxInFlight {
		return InFlight
	}
	if l.cfg.Capacity > 0 && l.inFlight >= l.cfg.Capacity {
		live := l.weightLive
		if u.inFlight == 0 {
			live += u.weight
		}
		// Past its share: inFlight ≥ Capacity·w/Σw, in integers.
		if u.inFlight*live >= l.cfg.Capacity*u.weight {
			return FairShare
		}
	}
	if t.MaxSessions > 0 && session != "" {
		if seen, known := u.sessions[session]; !known || now.Sub(seen) >= l.cfg.SessionIdle {
			l.sweep(u, now)
			if len(u.sessions) >= t.MaxSessions {
				return Sessions
			}
		}
		if u.sessions == nil {
			u.sessions = map[string]time.Time{}
		}
		u.sessions[session] = now
	}
	if u.inFlight == 0 {
		l.weightLive += u.weight
	}
	u.inFlight++
	l.inFlight++
	return OK
}

// Release ends a request Acquire let through.
func (l *Limits) Release(t *Tenant) {
	if t == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.state[t.Name]
	if u == nil || u.inFlight == 0 {
		return
	}
	u.inFlight--
	l.inFlight--
	if u.inFlight == 0 {
		l.weightLive -= u.weight
		if len(u.sessions) == 0 {
			delete(l.state, t.Name)
		}
	}
}

// EndSession stops counting a scoped session against its tenant (the
// session ended: a final request, a release).
func (l *Limits) EndSession(t *Tenant, session string) {
	if t == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if u := l.state[t.Name]; u != nil {
		delete(u.sessions, session)
		if u.inFlight == 0 && len(u.sessions) == 0 {
			delete(l.state, t.Name)
		}
	}
}

// InFlight returns tenant name's requests in flight.
func (l *Limits) InFlight(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if u := l.state[name]; u != nil {
		return u.inFlight
	}
	return 0
}

// sweep drops u's sessions idle past SessionIdle; it runs only when a new
// session meets a full table, so its cost is paid by the sessions it ends.
func (l *Limits) sweep(u *usage, now time.Time) {
	for id, seen := range u.sessions {
		if now.Sub(seen) >= l.cfg.SessionIdle {
			delete(u.sessions, id)
		}
	}
}
