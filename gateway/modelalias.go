package gateway

import (
	"encoding/json"
	"fmt"
	"path"
	"strings"
)

// ModelAlias maps the model names a client asks for to the model the
// workers serve: a harness with built-in model names (Claude Code asks for
// "claude-sonnet-4-5" and "claude-haiku-4-5" unless told otherwise) then
// reaches the served model unchanged. Pattern is a path.Match glob over the
// whole name ("claude-*"; a malformed pattern matches nothing, and
// ParseModelAlias refuses it); Model is the served model's name.
type ModelAlias struct {
	Pattern string
	Model   string
}

// ParseModelAlias reads PATTERN=MODEL (the proxy's --model-alias).
func ParseModelAlias(s string) (ModelAlias, error) {
	p, m, ok := strings.Cut(s, "=")
	p, m = strings.TrimSpace(p), strings.TrimSpace(m)
	if !ok || p == "" || m == "" {
		return ModelAlias{}, fmt.Errorf("gateway: model alias %q: want PATTERN=MODEL", s)
	}
	if _, err := path.Match(p, ""); err != nil {
		return ModelAlias{}, fmt.Errorf("gateway: model alias %q: pattern: %w", s, err)
	}
	return ModelAlias{Pattern: p, Model: m}, nil
}

// aliasModel returns the model name maps to under aliases (the first
// pattern that matches wins) and whether one matched.
func aliasModel(aliases []ModelAlias, name string) (string, bool) {
	for _, a := range aliases {
		if ok, _ := path.Match(a.Pattern, name); ok {
			return a.Model, true
		}
	}
	return name, false
}

// withModel returns body (a JSON object) with its "model" field set to
// model. The other fields are kept as they were, byte for byte; their
// order is not.
func withModel(body []byte, model string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	v, err := json.Marshal(model)
	if err != nil {
		return nil, err
	}
	m["model"] = v
	return json.Marshal(m)
}

// aliasModels adds the aliases to an OpenAI model list (the workers'
// /v1/models reply): one entry per alias, its id the pattern and its root
// and parent the served model, after the served models.
func aliasModels(list []byte, aliases []ModelAlias) ([]byte, error) {
	if len(aliases) == 0 {
		return list, nil
	}
	var in map[string]json.RawMessage
	if err := json.Unmarshal(list, &in); err != nil {
		return nil, err
	}
	var data []json.RawMessage
	if raw, ok := in["data"]; ok {
		if err := json.Unmarshal(raw, &data); err != nil {
			return nil, err
		}
	}
	for _, a := range aliases {
		e, err := json.Marshal(map[string]any{"id": a.Pattern, "object": "model", "owned_by": "agentkv-alias",
			"root": a.Model, "parent": a.Model})
		if err != nil {
			return nil, err
		}
		data = append(data, e)
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return nil, err
	}
	in["data"] = raw
	return json.Marshal(in)
}
