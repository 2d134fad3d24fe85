package mock

import (
	"encoding/json"
	"strings"

	"github.com/agentkv/agentkv/internal/wordtok"
)

// The tool-call rule.
//
// The mock calls a tool when, and only when, the request declares tools,
// its tool choice is not "none", and the conversation's current turn (the
// messages after the last assistant message) has a user message and no
// tool result: so each user turn gets at most one tool call, and the
// answer to the tool's result is text, which ends the turn. A harness
// running non-interactively therefore always terminates: user → tool call
// → tool result → text.
//
// Tool results come back as OpenAI "tool" messages, Responses
// function_call_output items, or Anthropic tool_result blocks in a user
// message, which may carry text blocks after the results (Claude Code
// puts system reminders there), or which a harness may follow with a
// user message; a turn that carries a tool result is answered with text
// all the same (the earlier rule, "the last message is the user's",
// called the tool again there, a loop). System and
// developer messages are not turns: Claude Code 2.1 sends its
// environment as a system message after the user's, and that is still
// the user's turn.
//
// The tool is the one tool_choice names, else the first declared tool
// whose name is a read-only one (readOnlyTools, case-insensitive, in that
// order of preference), else the first whose name contains read, list,
// glob, grep, search or view, else the first declared. Its arguments hold
// every required property of its JSON schema (and no optional one), each
// filled by fillValue.
var readOnlyTools = []string{"Read", "read_file", "read", "Glob", "glob", "LS", "ls", "list",
	"list_files", "list_dir", "Grep", "grep", "search", "view"}

var readOnlyHints = []string{"read", "list", "glob", "grep", "search", "view"}

// pickTool returns the tool to call, or false for a text reply.
func pickTool(msgs []wordtok.Message, tools []wordtok.Tool, mode, named string) (wordtok.Tool, bool) {
	if len(tools) == 0 || mode == "none" || !userTurn(msgs) {
		return wordtok.Tool{}, false
	}
	if named != "" {
		for _, t := range tools {
			if t.Name == named {
				return t, true
			}
		}
	}
	for _, want := range readOnlyTools {
		for _, t := range tools {
			if strings.EqualFold(t.Name, want) {
				return t, true
			}
		}
	}
	for _, t := range tools {
		n := strings.ToLower(t.Name)
		for _, h := range readOnlyHints {
			if strings.Contains(n, h) {
				return t, true
			}
		}
	}
	return tools[0], true
}

// userTurn reports whether the conversation's current turn, the messages
// after its last assistant message, is a user's turn that has no tool
// result in it.
func userTurn(msgs []wordtok.Message) bool {
	user := false
	for i := len(msgs) - 1; i >= 0; i-- {
		switch msgs[i].Role {
		case "assistant":
			return user
		case "tool":
			return false
		case "user":
			user = true
		}
	}
	return user
}

// schema is the part of a JSON schema the arguments are filled from.
type schema struct {
	Type       json.RawMessage    `json:"type"`
	Properties map[string]*schema `json:"properties"`
	Required   []string           `json:"required"`
	Items      *schema            `json:"items"`
	Enum       []json.RawMessage  `json:"enum"`
	Default    json.RawMessage    `json:"default"`
	AnyOf      []*schema          `json:"anyOf"`
	OneOf      []*schema          `json:"oneOf"`
}

func (s *schema) typ() string {
	var t string
	if json.Unmarshal(s.Type, &t) == nil {
		return t
	}
	var ts []string
	if json.Unmarshal(s.Type, &ts) == nil {
		for _, t := range ts {
			if t != "null" {
				return t
			}
		}
	}
	if len(s.Properties) > 0 {
		return "object"
	}
	return ""
}

// toolArguments returns the JSON arguments of a call to t.
func toolArguments(t wordtok.Tool) string {
	var s schema
	if len(t.Parameters) == 0 || json.Unmarshal(t.Parameters, &s) != nil {
		return "{}"
	}
	v := fillValue("", &s, 0)
	if _, ok := v.(map[string]any); !ok {
		v = map[string]any{}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// fillValue returns a value for a property named name with schema s: its
// default, else its first enum value, else by type: strings by name (a
// path-like name gets "README.md", a pattern "*", a command "ls", a url
// "http://127.0.0.1/", else "mock"), numbers 1, booleans false, arrays one
// element, objects their required properties.
func fillValue(name string, s *schema, depth int) any {
	if s == nil || depth > 8 {
		return nil
	}
	if len(s.Default) > 0 {
		var v any
		if json.Unmarshal(s.Default, &v) == nil {
			return v
		}
	}
	if len(s.Enum) > 0 {
		var v any
		if json.Unmarshal(s.Enum[0], &v) == nil {
			return v
		}
	}
	if len(s.AnyOf) > 0 {
		return fillValue(name, s.AnyOf[0], depth+1)
	}
	if len(s.OneOf) > 0 {
		return fillValue(name, s.OneOf[0], depth+1)
	}
	switch s.typ() {
	case "object":
		m := map[string]any{}
		for _, r := range s.Required {
			m[r] = fillValue(r, s.Properties[r], depth+1)
		}
		return m
	case "array":
		return []any{fillValue(name, s.Items, depth+1)}
	case "integer", "number":
		return 1
	case "boolean":
		return false
	case "null":
		return nil
	}
	n := strings.ToLower(name)
	switch {
	case strings.Contains(n, "path") || strings.Contains(n, "file") || strings.Contains(n, "dir"):
		return "README.md"
	case strings.Contains(n, "pattern") || strings.Contains(n, "glob") || strings.Contains(n, "query"):
		return "*"
	case strings.Contains(n, "command") || n == "cmd":
		return "ls"
	case strings.Contains(n, "url"):
		return "http://127.0.0.1/"
	}
	return "mock"
}
