package hftok

import (
	"errors"
	"fmt"
	"strings"

	"github.com/agentkv/agentkv/internal/jinja"
)

// conversation converts request messages into the template's messages as
// vLLM's parse_chat_messages does (vllm/entrypoints/chat_utils.py):
//
//   - content: a string, or a list of parts whose text parts (type text,
//     input_text, output_text, refusal; thinking's "thinking"; a bare
//     string) are joined with "\n" in the string format, or kept as
//     {"type": "text", "text": ...} parts in the openai format; a missing
//     or null content is empty; a text part with null text is skipped;
//     media parts are ErrUnsupported;
//   - each message has role and content, then: an assistant's tool_calls
//     (when not null; an empty list is dropped) with each function's
//     arguments parsed from their JSON text (invalid or non-object → {}),
//     and reasoning plus reasoning_content when reasoning is set; a tool
//     message's tool_call_id, and its content parts always joined; name
//     and task when strings; a developer message's tools.
func (c *Chat) conversation(in []jinja.Value, prev []convMemo) ([]jinja.Value, []convMemo, error) {
	out := make([]jinja.Value, 0, len(in))
	conv := make([]convMemo, 0, len(in))
	for i, m := range in {
		if !m.IsDict() {
			return nil, nil, fmt.Errorf("hftok: message %d is not an object", i)
		}
		md := m.AsDict()
		// The parse memo hands an unchanged message back as the same
		// Dict: its conversion then is the same too.
		if i < len(prev) && prev[i].in == md {
			out, conv = append(out, prev[i].out), append(conv, prev[i])
			continue
		}
		role, ok := md.Get("role")
		if !ok || !role.IsString() {
			return nil, nil, fmt.Errorf("hftok: message %d has no role", i)
		}
		r := role.AsString()
		content, err := c.content(md, r == "tool")
		if err != nil {
			return nil, nil, fmt.Errorf("message %d: %w", i, err)
		}
		v := jinja.NewDict()
		d := v.AsDict()
		d.Set("role", role)
		d.Set("content", content)
		switch r {
		case "assistant":
			if tc, ok := md.Get("tool_calls"); ok && tc.IsList() && tc.AsList().Len() > 0 {
				d.Set("tool_calls", toolCalls(tc.AsList().Items))
			}
			if rs, ok := md.Get("reasoning"); ok && !rs.IsNone() {
				d.Set("reasoning", rs)
				d.Set("reasoning_content", rs)
			}
		case "tool":
			if id, ok := md.Get("tool_call_id"); ok {
				d.Set("tool_call_id", id)
			}
		}
		for _, k := range []string{"name", "task"} {
			if s, ok := md.Get(k); ok && s.IsString() {
				d.Set(k, s)
			}
		}
		if r == "developer" {
			d.Set("tools", field(md, "tools", jinja.None()))
		}
		out, conv = append(out, v), append(conv, convMemo{md, v})
	}
	return out, conv, nil
}

// convMemo is one message as parsed and as conversation converted it.
type convMemo struct {
	in  *jinja.Dict
	out jinja.Value
}

// content converts a message's content; joined forces the string form
// (vLLM joins a tool message's text parts whatever the format).
func (c *Chat) content(md *jinja.Dict, joined bool) (jinja.Value, error) {
	raw, ok := md.Get("content")
	var parts []jinja.Value
	switch {
	case !ok || raw.IsNone():
	case raw.IsString():
		parts = []jinja.Value{raw}
	case raw.IsList():
		parts = raw.AsList().Items
	default:
		return jinja.Undefined(), errors.New("hftok: content is neither a string nor a list of parts")
	}
	var texts []string
	for _, p := range parts {
		t, keep, err := partText(p)
		if err != nil {
			return jinja.Undefined(), err
		}
		if keep {
			texts = append(texts, t)
		}
	}
	if !c.openai || joined {
		return jinja.NewString(strings.Join(texts, "\n")), nil
	}
	items := make([]jinja.Value, len(texts))
	for i, t := range texts {
		v := jinja.NewDict()
		v.AsDict().Set("type", jinja.NewString("text"))
		v.AsDict().Set("text", jinja.NewString(t))
		items[i] = v
	}
	return jinja.NewList(items), nil
}

// partText reads one content part: its text, and whether it is kept.
func partText(p jinja.Value) (string, bool, error) {
	if p.IsString() {
		return p.AsString(), true, nil
	}
	if !p.IsDict() {
		return "", false, errors.New("hftok: a content part is neither a string nor an object")
	}
	d := p.AsDict()
	typ, _ := d.Get("type")
	if u, ok := d.Get("uuid"); ok && !u.IsNone() {
		return "", false, fmt.Errorf("%w: a content part with a uuid", ErrUnsupported)
	}
	key := ""
	if typ.IsString() {
		switch typ.AsString() {
		case "text", "input_text", "output_text":
			key = "text"
		case "refusal":
			key = "refusal"
		case "thinking":
			key = "thinking"
		case "tool_reference":
			key = "name"
		}
	}
	if key == "" {
		return "", false, fmt.Errorf("%w: content part of type %v", ErrUnsupported, typ)
	}
	t, ok := d.Get(key)
	if !ok || t.IsNone() {
		return "", false, nil // vLLM skips a text part without text
	}
	if !t.IsString() {
		return "", false, fmt.Errorf("hftok: a %s part's %s is not a string", typ.AsString(), key)
	}
	return t.AsString(), true, nil
}

// toolCalls copies an assistant's tool calls with each function's
// arguments parsed from JSON text, as vLLM's _postprocess_messages does.
func toolCalls(in []jinja.Value) jinja.Value {
	out := make([]jinja.Value, 0, len(in))
	for _, call := range in {
		if !call.IsDict() {
			out = append(out, call)
			continue
		}
		cv := copyDict(call.AsDict())
		if fn, ok := cv.AsDict().Get("function"); ok && fn.IsDict() {
			fv := copyDict(fn.AsDict())
			fd := fv.AsDict()
			args, _ := fd.Get("arguments")
			switch {
			case args.IsString():
				parsed, err := parseJSON([]byte(args.AsString()))
				if err != nil {
					parsed = jinja.NewDict()
				}
				fd.Set("arguments", parsed)
			case !args.IsDict() && !args.IsList():
				fd.Set("arguments", jinja.NewDict())
			}
			cv.AsDict().Set("function", fv)
		}
		out = append(out, cv)
	}
	return jinja.NewList(out)
}

func copyDict(d *jinja.Dict) jinja.Value {
	v := jinja.NewDict()
	for _, k := range d.Keys {
		v.AsDict().Set(k, d.Data[k])
	}
	return v
}

// tools converts the request's tools as vLLM's model_dump of
// ChatCompletionToolsParam gives them: {"type", "function": {"name",
// "description", "parameters"[, "strict"], other fields...}, other
// fields...}, with null for absent optional fields. No tools is None.
func (c *Chat) tools(r *jinja.Dict) jinja.Value {
	raw, ok := r.Get("tools")
	if !ok || !raw.IsList() {
		return jinja.None()
	}
	declared := []string{"name", "description", "parameters"}
	if c.strict {
		declared = append(declared, "strict")
	}
	out := make([]jinja.Value, 0, raw.AsList().Len())
	for _, t := range raw.AsList().Items {
		if !t.IsDict() {
			continue
		}
		td := t.AsDict()
		v := jinja.NewDict()
		d := v.AsDict()
		d.Set("type", field(td, "type", jinja.NewString("function")))
		fn := jinja.NewDict()
		if f, ok := td.Get("function"); ok && f.IsDict() {
			fd := f.AsDict()
			for _, k := range declared {
				fn.AsDict().Set(k, field(fd, k, jinja.None()))
			}
			for _, k := range fd.Keys {
				fn.AsDict().Set(k, fd.Data[k]) // extra fields after the declared ones
			}
		}
		d.Set("function", fn)
		for _, k := range td.Keys {
			if k != "type" && k != "function" {
				d.Set(k, td.Data[k])
			}
		}
		out = append(out, v)
	}
	return jinja.NewList(out)
}
