package translate

import (
	"bytes"
	"encoding/json"
	"strings"
)

// BillingPrefix starts the billing preamble Claude Code (2.1) puts first in
// every Messages request's system prompt, as its own text block:
//
//	x-anthropic-billing-header: cc_version=2.1.332.0b8; cc_entrypoint=sdk-cli;
//
// The three hex digits after the version change with the conversation's
// first prompt (captured from claude -p 2.1.332 against a local endpoint:
// 0b8, 1c9, 34c for three prompts), so two sessions, or a session and its
// subagent, differ in the first block of an otherwise identical system
// prompt and share no prefix blocks at all.
const BillingPrefix = "x-anthropic-billing-header:"

// StripBilling removes Claude Code's billing preamble from a Messages
// request body: a system text block that starts with BillingPrefix, or,
// for a string system prompt, leading lines that do. It returns the new
// body and true when it removed something, else body and false. Only the
// system member changes.
func StripBilling(body []byte) ([]byte, bool) {
	if !bytes.Contains(body, []byte(BillingPrefix)) {
		return body, false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return body, false
	}
	sys, ok := m["system"]
	if !ok {
		return body, false
	}
	var s string
	if json.Unmarshal(sys, &s) == nil {
		rest, cut := s, false
		for strings.HasPrefix(rest, BillingPrefix) {
			_, rest, _ = strings.Cut(rest, "\n")
			cut = true
		}
		if !cut {
			return body, false
		}
		m["system"], _ = json.Marshal(rest)
	} else {
		var blocks []json.RawMessage
		if json.Unmarshal(sys, &blocks) != nil {
			return body, false
		}
		kept := blocks[:0]
		for _, raw := range blocks {
			var b struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
			if json.Unmarshal(raw, &b) == nil && b.Type == "text" && strings.HasPrefix(b.Text, BillingPrefix) {
				continue
			}
			kept = append(kept, raw)
		}
		if len(kept) == len(blocks) {
			return body, false
		}
		m["system"], _ = json.Marshal(kept)
	}
	out, err := json.Marshal(m)
	if err != nil {
		return body, false
	}
	return out, true
}
