package translate

import (
	"encoding/json"
	"strings"

	"github.com/agentkv/agentkv/internal/apiwire"
)

// The translations speak chat completions to a worker in apiwire's wire
// shapes; these helpers build and read them.

// text returns a chat message content holding s (written even when empty).
func text(s string) apiwire.TextOr[apiwire.ChatContentPart] {
	return apiwire.Str[apiwire.ChatContentPart](s)
}

// usageInto folds a chat usage object (nil: none) into out.
func usageInto(u *apiwire.Usage, out *Usage) {
	if u == nil {
		return
	}
	out.HasUsage = true
	out.PromptTokens, out.CompletionTokens = u.PromptTokens, u.CompletionTokens
	if u.PromptTokensDetails != nil {
		out.CachedTokens = u.PromptTokensDetails.CachedTokens
	}
}

// textContent joins the text parts of a message content: a string, or a
// list of parts with "text" (other parts are skipped).
func textContent(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// content returns a message content: a plain string when every part is
// text (so a chat template sees what a plain-text client would send), a
// part list otherwise.
func content(parts []apiwire.ChatContentPart) apiwire.TextOr[apiwire.ChatContentPart] {
	if len(parts) == 0 {
		return text("")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type != "text" {
			return apiwire.TextOr[apiwire.ChatContentPart]{Parts: parts}
		}
		b.WriteString(p.Text)
	}
	return text(b.String())
}

// deref returns *s, or "" for nil.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
