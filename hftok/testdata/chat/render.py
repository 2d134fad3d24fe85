"""Reference renderer for hftok's chat tests: Python's jinja2 with the
environment transformers compiles chat templates in, fed the conversation
vLLM's chat_utils builds from a chat completions request. Reads JSON lines
{"template", "special", "body", "strict", "openai"} on stdin and writes
one JSON line per request: {"text": ...} or {"error": ...}.
Written for the test from the behaviour of transformers'
_compile_jinja_template and vLLM's parse_chat_messages."""
import json
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


TEXT_KEYS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal",
             "thinking": "thinking", "tool_reference": "name"}


def texts_of(content):
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    out = []
    for part in content:
        if isinstance(part, str):
            out.append(part)
            continue
        key = TEXT_KEYS[part["type"]]
        if part.get(key) is None:
            continue
        out.append(part[key])
    return out


def conversation(messages, openai):
    conv = []
    for m in messages:
        role = m["role"]
        texts = texts_of(m.get("content"))
        if openai and role != "tool":
            content = [{"type": "text", "text": t} for t in texts]
        else:
            content = "\n".join(texts)
        msg = {"role": role, "content": content}
        if role == "assistant":
            if m.get("tool_calls") is not None:
                msg["tool_calls"] = [dict(c) for c in m["tool_calls"]]
            if m.get("reasoning") is not None:
                msg["reasoning"] = m["reasoning"]
                msg["reasoning_content"] = m["reasoning"]
        elif role == "tool" and "tool_call_id" in m:
            msg["tool_call_id"] = m["tool_call_id"]
        for k in ("name", "task"):
            if isinstance(m.get(k), str):
                msg[k] = m[k]
        if role == "developer":
            msg["tools"] = m.get("tools")
        conv.append(msg)
    for msg in conv:
        calls = msg.get("tool_calls")
        if msg["role"] != "assistant" or not isinstance(calls, list):
            continue
        if not calls:
            del msg["tool_calls"]
            continue
        for i, c in enumerate(calls):
            c = dict(c)
            fn = dict(c["function"])
            args = fn.get("arguments")
            if isinstance(args, str):
                try:
                    fn["arguments"] = json.loads(args)
                except json.JSONDecodeError:
                    fn["arguments"] = {}
            elif not isinstance(args, (dict, list)):
                fn["arguments"] = {}
            c["function"] = fn
            calls[i] = c
    return conv


def tools_of(tools, strict):
    if tools is None:
        return None
    declared = ["name", "description", "parameters"] + (["strict"] if strict else [])
    out = []
    for t in tools:
        fn = t.get("function") or {}
        d = {k: fn.get(k) for k in declared}
        for k, v in fn.items():
            d[k] = v
        tool = {"type": t.get("type", "function"), "function": d}
        for k, v in t.items():
            if k not in ("type", "function"):
                tool[k] = v
        out.append(tool)
    return out


def render(req, env, cache):
    src = req["template"]
    if src not in cache:
        cache[src] = env.from_string(src)
    body = req["body"]
    variables = dict(req.get("special") or {})
    variables.update(body.get("chat_template_kwargs") or {})
    messages = conversation(body["messages"], req.get("openai", False))
    gen = body.get("add_generation_prompt")
    gen = True if gen is None else gen
    cont = body.get("continue_final_message") or False
    variables.update(messages=messages, tools=tools_of(body.get("tools"), req.get("strict", False)),
                     documents=body.get("documents"), add_generation_prompt=gen,
                     continue_final_message=cont)
    text = cache[src].render(**variables)
    if cont:
        final = messages[-1]["content"]
        if isinstance(final, list):
            final = next(p["text"] for p in reversed(final) if "text" in p)
        final = final.strip()
        text = text[: text.rindex(final) + len(final)]
    return text


def main():
    env = environment()
    cache = {}
    for line in sys.stdin:
        req = json.loads(line)
        try:
            out = {"text": render(req, env, cache)}
        except Exception as e:  # the Go side must fail too
            out = {"error": f"{type(e).__name__}: {e}"}
        sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
