package tenant

import (
	"sync"
	"time"
)

// DefaultSessionIdle is how long a session counts against its tenant's
// MaxSessions after its last request when it does not end explicitly.
const DefaultSessionIdle = 30 * time.Minute

// DefaultRecent is how long a tenant still counts toward the shares
// after its last request ended (LimitsConfig.Recent).
const DefaultRecent = 30 * time.Second

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
	// Recent is how long a tenant whose requests have all ended still
	// counts toward the shares that Standing divides (0: DefaultRecent;
	// negative: not at all), so that a tenant between turns keeps the
	// others' standing as it was and its next prompt finds the engines as
	// its last one did. Refusals (Acquire) count only the tenants with
	// requests in flight: an idle share is lent, never held empty.
	Recent time.Duration
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
	// weightRecent is Σ weight over the recent tenants: nothing in
	// flight, their last request ended within Recent (usage.recent);
	// recentQ holds their ends in order, expired from the front.
	weightRecent int
	recentQ      []recentEnd
}

type usage struct {
	weight   int
	inFlight int
	sessions map[string]time.Time // scoped id → last request
	// recent: nothing in flight since lastEnd, within Recent of it.
	recent  bool
	lastEnd time.Time
}

// recentEnd is a tenant's last request's end, queued for expiry; an
// entry whose at no longer matches its usage is stale.
type recentEnd struct {
	name string
	u    *usage
	at   time.Time
}

// NewLimits returns Limits with cfg's defaults filled.
func NewLimits(cfg LimitsConfig) *Limits {
	if cfg.SessionIdle <= 0 {
		cfg.SessionIdle = DefaultSessionIdle
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Recent == 0 {
		cfg.Recent = DefaultRecent
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
	l.expire(now)
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
		if u.recent {
			u.recent = false
			l.weightRecent -= u.weight
		}
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
	now := l.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire(now)
	u := l.state[t.Name]
	if u == nil || u.inFlight == 0 {
		return
	}
	u.inFlight--
	l.inFlight--
	if u.inFlight > 0 {
		return
	}
	l.weightLive -= u.weight
	if l.cfg.Recent > 0 && l.cfg.Capacity > 0 {
		u.recent, u.lastEnd = true, now
		l.weightRecent += u.weight
		l.recentQ = append(l.recentQ, recentEnd{name: t.Name, u: u, at: now})
		return
	}
	if len(u.sessions) == 0 {
		delete(l.state, t.Name)
	}
}

// expire ends the recency of the tenants whose last request ended Recent
// or more before now (under mu); amortised O(1): recentQ holds an entry
// per request end in the last Recent, so its length is bounded by the
// request rate.
func (l *Limits) expire(now time.Time) {
	i := 0
	for ; i < len(l.recentQ); i++ {
		e := l.recentQ[i]
		if now.Sub(e.at) < l.cfg.Recent {
			break
		}
		u := e.u
		if !u.recent || !u.lastEnd.Equal(e.at) {
			continue // active again since, or a later end is queued
		}
		u.recent = false
		l.weightRecent -= u.weight
		if u.inFlight == 0 && len(u.sessions) == 0 && l.state[e.name] == u {
			delete(l.state, e.name)
		}
	}
	if i > 0 {
		clear(l.recentQ[:i])
		l.recentQ = l.recentQ[i:]
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
		if u.inFlight == 0 && len(u.sessions) == 0 && !u.recent {
			delete(l.state, t.Name)
		}
	}
}

// Standing is where a tenant stands against its weighted share
// (Limits.Standing).
type Standing int

// Standings.
const (
	// Even: no limits, or the tenant holds its weighted share of the
	// requests in flight, or is not past its share of Capacity.
	Even Standing = iota
	// Under: the tenant holds less than its weighted share of the
	// requests in flight (so another tenant holds more): its requests'
	// time to first token is what the share protects.
	Under
	// Over: the tenant holds at least its weighted share of Capacity and
	// more than its share of what is in flight (another tenant holds
	// less): its prefills yield to the others' (Gate).
	Over
)

// String returns the standing's name.
func (s Standing) String() string {
	switch s {
	case Even:
		return "even"
	case Under:
		return "under"
	case Over:
		return "over"
	}
	return "unknown"
}

// Standing returns where tenant t stands now, counting the requests of it
// that Acquire let through (a request asking about itself is counted).
// With Capacity 0 or a nil t it is Even. In integers, with n the tenant's
// requests in flight, w its weight, N all requests in flight and W the
// weights of the tenants with requests in flight or recent (its own
// included; LimitsConfig.Recent): Under is n·W < N·w; Over is
// n·W ≥ Capacity·w and n·W > N·w. Shares are not held until Capacity
// requests are in flight (Acquire), but a tenant's standing counts from
// the start: a rollout filling an idle capacity is over its share the
// moment an interactive tenant arrives, and, while that tenant is recent,
// between its turns too, so its next turn finds the rollout's prefills
// already paced (Gate). Amortised O(1).
func (l *Limits) Standing(t *Tenant) Standing {
	if t == nil || l.cfg.Capacity <= 0 {
		return Even
	}
	now := l.cfg.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expire(now)
	n, w, live, all := 0, t.Weight, l.weightLive+l.weightRecent, l.inFlight
	recent := false
	if u := l.state[t.Name]; u != nil {
		n, w, recent = u.inFlight, u.weight, u.recent
	}
	if n == 0 && !recent {
		live += w
	}
	switch {
	case n*live < all*w:
		return Under
	case n*live >= l.cfg.Capacity*w && n*live > all*w:
		return Over
	}
	return Even
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
