// Package agentkv composes the agentkv packages into an in-process,
// session-aware KV router for agentic LLM inference.
package agentkv
