// Package tenant authenticates a gateway's callers and keeps tenants apart:
// API keys (one or more per tenant, read from a file and reloaded on
// demand), session ids scoped by tenant, a per-tenant cache salt, and
// per-tenant limits with a weighted share of contended engines.
//
// # Keys
//
// Parse reads a key file, one key a line:
//
//	# NAME  KEY                               OPTIONS
//	alice   sk-alice-0123456789abcdef         weight=2 max-in-flight=64
//	bob     sk-bob-0123456789abcdef01         max-sessions=500 max-programs=64
//	ops     sk-ops-0123456789abcdef012        admin
//	public  sk-pub-0123456789abcdef0123       shared-cache
//
// A key is looked up by its SHA-256 and then compared in constant time,
// so response timing tells an attacker nothing about a key's bytes. Set
// holds the keys in use and swaps them atomically on Reload (the proxy
// reloads on SIGHUP); a file that fails to parse leaves the old keys in
// place. Key reads the key a request carries: Authorization: Bearer KEY
// (OpenAI SDKs, SGLang and vLLM clients), else x-api-key (Anthropic SDKs).
//
// # Isolation
//
// Scope prefixes a session id with its tenant's name, so the same id sent
// by two tenants names two sessions: tenant B cannot reach tenant A's
// session, its worker binding, its admission program, end it or release
// it. Salt is the tenant's cache_salt: the gateway forwards it on every
// request (replacing any the client sent), the engine mixes it into its
// block hashes (vLLM's cache_salt; the mock worker does the same), and the
// router mixes it into the request's hashes, so no tenant is credited
// with, or can time, another tenant's cached prefix. A tenant marked
// shared-cache is forwarded no salt and shares cached prefixes with every
// other shared-cache tenant (a public system prompt).
//
// # Limits
//
// Limits enforces MaxInFlight and MaxSessions per tenant and, once the
// requests in flight reach LimitsConfig.Capacity, a weighted share: a
// tenant at or past Capacity·weight/Σweights of the tenants with requests
// in flight is refused (FairShare) until it drops under, while a tenant
// under its share is still let through. The gateway answers every refusal
// with 429 and Retry-After in the caller's API shape.
//
// Limits.Standing says where a tenant stands against its share (Under,
// Even, Over), counting as present a tenant whose last request ended less
// than LimitsConfig.Recent ago (30 s), and Gate keeps an Over tenant's prefills out of the engine
// steps that compute the others': on each worker, its requests wait while
// a request of another standing awaits its first token, and go one (Slots)
// at a time, at most GateConfig.MaxHold.
//
// # Concurrency
//
// Keys and Tenant are immutable once parsed; Set, Limits and Gate are safe
// for concurrent use.
package tenant
