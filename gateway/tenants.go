package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/agentkv/agentkv/gateway/tenant"
)

// This file is the gateway's side of package tenant: who is calling
// (Config.Keys), what they may reach (their own sessions, their own cached
// prefixes through the cache salt) and how much (Config.TenantLimits).

// authenticate returns the caller's tenant, or answers 401 in the API's
// shape and returns false. With no keys configured every caller is
// anonymous (nil, true).
func (g *Gateway) authenticate(w http.ResponseWriter, r *http.Request, a API) (*tenant.Tenant, bool) {
	if g.cfg.Keys == nil {
		return nil, true
	}
	t, err := g.cfg.Keys.Authenticate(r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"))
	if err != nil {
		g.m.tenantRejected.WithLabelValues("unauthorized").Inc()
		w.Header().Set("WWW-Authenticate", `Bearer realm="agentkv"`)
		g.reject(w, a, http.StatusUnauthorized, err.Error())
		return nil, false
	}
	return t, true
}

// authenticateKey is authenticate for the paths with their own error
// shapes (the token APIs): on failure it returns the error to answer 401
// with.
func (g *Gateway) authenticateKey(r *http.Request) (*tenant.Tenant, error) {
	if g.cfg.Keys == nil {
		return nil, nil
	}
	t, err := g.cfg.Keys.Authenticate(r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"))
	if err != nil {
		g.m.tenantRejected.WithLabelValues("unauthorized").Inc()
	}
	return t, err
}

// RequireAdmin wraps h so that, with keys configured, only an admin key
// reaches it (401 without a valid key, 403 with a tenant's): for /metrics,
// the worker registry, pause and resume. Without keys it returns h.
func (g *Gateway) RequireAdmin(h http.Handler) http.Handler {
	if g.cfg.Keys == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := Chat
		if wantsAnthropic(r) {
			a = Messages
		}
		t, ok := g.authenticate(w, r, a)
		if !ok {
			return
		}
		if !t.Admin {
			g.m.tenantRejected.WithLabelValues("forbidden").Inc()
			g.reject(w, a, http.StatusForbidden, "agentkv gateway: "+r.URL.Path+" needs an admin key")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// scope puts the call's session ids in its tenant's namespace, so that the
// same id from two tenants names two sessions (and no tenant can reach,
// end or release another's).
func scope(c *call) {
	if c.tenant == nil {
		return
	}
	c.agent.SessionID = tenant.Scope(c.tenant, c.agent.SessionID)
	c.agent.ParentSessionID = tenant.Scope(c.tenant, c.agent.ParentSessionID)
}

// admitTenant applies the tenant's limits; on a refusal it has answered
// 429 with Retry-After and returns false. On true the caller must call
// g.limits.Release(c.tenant) when the request ends.
func (g *Gateway) admitTenant(w http.ResponseWriter, c *call) bool {
	if c.tenant == nil {
		return true
	}
	ref := g.limits.Acquire(c.tenant, c.agent.SessionID)
	if ref == tenant.OK {
		return true
	}
	g.m.tenantRejected.WithLabelValues(ref.String()).Inc()
	w.Header().Set("Retry-After", "1")
	var msg string
	switch ref {
	case tenant.InFlight:
		msg = "tenant " + c.tenant.Name + " has " + strconv.Itoa(c.tenant.MaxInFlight) + " requests in flight, its limit"
	case tenant.Sessions:
		msg = "tenant " + c.tenant.Name + " has " + strconv.Itoa(c.tenant.MaxSessions) + " live sessions, its limit"
	default:
		msg = "tenant " + c.tenant.Name + " is past its share of the busy engines"
	}
	g.reject(w, c.api, http.StatusTooManyRequests, "agentkv gateway: "+msg+"; retry shortly")
	return false
}

// salt sets the tenant's cache_salt on the bodies the call forwards
// (replacing any the client sent: a client must not pick another
// tenant's salt) and on the router's request, so the engine and the index
// both isolate the tenant's cached prefixes.
func salt(c *call) error {
	if c.tenant == nil || c.salted { // parse spliced it in already
		return nil
	}
	s := c.tenant.Salt
	same := len(c.chatB) > 0 && len(c.body) > 0 && &c.chatB[0] == &c.body[0]
	var err error
	if c.body, err = setCacheSalt(c.body, s); err != nil {
		return err
	}
	if same {
		c.chatB = c.body
	} else if c.chatB, err = setCacheSalt(c.chatB, s); err != nil {
		return err
	}
	return nil
}

// setCacheSalt returns the JSON object body with its top-level cache_salt
// set to s (removed when s is ""). The common case, a body without one,
// is a splice; a body that carries one is decoded and re-encoded.
func setCacheSalt(body []byte, s string) ([]byte, error) {
	if len(body) == 0 {
		return body, nil
	}
	if !bytes.Contains(body, []byte(`"cache_salt"`)) {
		if s == "" {
			return body, nil
		}
		i := bytes.IndexByte(body, '{')
		if i < 0 {
			return nil, badRequest("the body is not a JSON object")
		}
		v, _ := json.Marshal(s)
		out := make([]byte, 0, len(body)+len(v)+16)
		out = append(append(append(out, body[:i+1]...), `"cache_salt":`...), v...)
		rest := bytes.TrimLeft(body[i+1:], " \t\r\n")
		if len(rest) > 0 && rest[0] != '}' {
			out = append(out, ',')
		}
		return append(out, body[i+1:]...), nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, badRequest("%v", err)
	}
	if s == "" {
		delete(m, "cache_salt")
	} else {
		v, _ := json.Marshal(s)
		m["cache_salt"] = v
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil, errors.Join(ErrBadRequest, err)
	}
	return out, nil
}
