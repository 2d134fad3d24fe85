package jinja_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentkv/agentkv/internal/jinja"
)

// memoTemplates are templates whose loops read and write what the
// memoization must track: namespaces set and read across iterations,
// locals left by an earlier iteration, loop attributes, the previous and
// next items, indexing into messages, nested loops, globals; and ones it
// must refuse (break, a macro).
var memoTemplates = map[string]string{
	"namespace": `{%- set ns = namespace(n=0, last='') -%}
{%- for m in messages -%}
{%- if m.role == 'user' %}{% set ns.n = ns.n + 1 %}{% endif -%}
[{{ loop.index0 }} {{ m.role }}#{{ ns.n }} after {{ ns.last }}{% if loop.last %} last{% endif %}]{{ m.content }}
{%- set ns.last = m.role -%}
{%- endfor %}{% if add_generation_prompt %}<gen>{% endif %}`,
	"length": `{%- for m in messages -%}{{ loop.index }}/{{ loop.length }} {{ m.content }}{% endfor %}`,
	"leak": `{%- for m in messages -%}
{%- if prev is defined %}(after {{ prev }}){% endif %}{{ m.role }}: {{ m.content }}
{%- set prev = m.role -%}
{%- endfor -%}`,
	"items": `{%- for m in messages -%}
{%- if loop.previtem is defined and loop.previtem.role == m.role %}+{% endif -%}
{%- if m.role == 'tool' and (loop.first or messages[loop.index0 - 1].role != 'tool') %}<tools>{% endif -%}
{{ m.content }}
{%- if m.tool_calls %}{% for tc in m.tool_calls %}<call {{ tc.name }}>{% endfor %}{% endif -%}
{%- if loop.nextitem is defined %}|{% endif -%}
{%- endfor -%}`,
	"compare": `{%- set ns = namespace(last_user=-1, mark='user') -%}
{%- for m in messages -%}{%- if m.role == ns.mark %}{% set ns.last_user = loop.index0 %}{% endif -%}{%- endfor -%}
{%- for m in messages -%}
{%- if loop.index0 > ns.last_user %}<new>{% elif loop.index0 == ns.last_user %}<last>{% elif ns.last_user - loop.index0 < 3 %}<near>{% endif -%}
{%- if ns.last_user <= loop.index0 + 1 and flag != (ns.mark == m.role) %}~{% endif -%}
{%- if m.content != ns.mark and ns.mark < m.role %}>{% endif -%}
{{ m.content }}
{%- endfor -%}`,
	"global": `{%- for m in messages -%}{% if flag %}!{% endif %}{{ m.content | upper }}{% endfor %}`,
	"break":  `{%- for m in messages -%}{% if m.content == 'stop' %}{% break %}{% endif %}{{ m.content }}{% endfor %}`,
	"macro":  `{%- macro show(m) %}{{ m.role }}{% endmacro -%}{%- for m in messages -%}{{ show(m) }}{% endfor %}`,
}

// TestLoopMemo: over random agent conversations, each turn resending the
// last turn's messages (the same Dicts) plus new ones, sometimes editing
// an earlier message (a new Dict), cutting the conversation back or
// flipping a global, a render that reuses the last turn's memo
// (RenderMemo) equals a plain render, byte for byte, for every template
// here and hftok's test chat templates. The memo is used (fewer body runs
// than iterations) where the template allows it and refused where it must
// be.
func TestLoopMemo(t *testing.T) {
	templates := map[string]string{}
	for k, v := range memoTemplates {
		templates[k] = v
	}
	for _, name := range []string{"tools.jinja", "parts.jinja"} {
		src, err := os.ReadFile(filepath.Join("..", "..", "hftok", "testdata", "chat", name))
		if err != nil {
			t.Fatal(err)
		}
		templates[name] = string(src)
	}
	roles := []string{"user", "assistant", "tool", "system"}
	contents := []string{"hi", "ls -la", "<result>a.go</result>", "<think>plan</think>done", "stop", "", "multi\nline"}
	for name, src := range templates {
		tmpl, err := jinja.Compile(src)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		r := rand.New(rand.NewPCG(9, uint64(len(name))))
		newMsg := func() jinja.Value {
			d := jinja.NewDict()
			d.AsDict().Set("role", jinja.NewString(roles[r.IntN(len(roles))]))
			d.AsDict().Set("content", jinja.NewString(contents[r.IntN(len(contents))]+fmt.Sprint(r.IntN(3))))
			if r.IntN(4) == 0 {
				tc := jinja.NewDict()
				tc.AsDict().Set("name", jinja.NewString("Bash"))
				d.AsDict().Set("tool_calls", jinja.NewList([]jinja.Value{tc}))
			}
			return d
		}
		replayed := 0
		for session := 0; session < 40; session++ {
			var msgs []jinja.Value
			var memo *jinja.LoopMemo
			flag := false
			for turn := 0; turn < 12; turn++ {
				switch r.IntN(8) {
				case 0:
					if len(msgs) > 0 {
						msgs[r.IntN(len(msgs))] = newMsg()
					}
				case 1:
					msgs = msgs[:r.IntN(len(msgs)+1)]
				case 2:
					flag = !flag
				}
				for range 1 + r.IntN(3) {
					msgs = append(msgs, newMsg())
				}
				vars := func() map[string]jinja.Value {
					return map[string]jinja.Value{"messages": jinja.NewList(append([]jinja.Value(nil), msgs...)),
						"flag": jinja.NewBool(flag), "add_generation_prompt": jinja.NewBool(turn%3 != 0), "tools": jinja.None()}
				}
				want, wantErr := tmpl.RenderValues(vars())
				got, next, err := tmpl.RenderMemo(vars(), 0, memo)
				if (err != nil) != (wantErr != nil) || got != want {
					t.Fatalf("%s session %d turn %d: memoized %q (%v), plain %q (%v)", name, session, turn, got, err, want, wantErr)
				}
				replayed += jinja.MemoReplayed(next, memo)
				memo = next
			}
		}
		switch name {
		case "length": // a turn that changes loop.length runs every iteration again
		case "break", "macro":
			if replayed != 0 {
				t.Errorf("%s: %d iterations replayed; the template must not be memoized", name, replayed)
			}
		default:
			if replayed < 100 {
				t.Errorf("%s: only %d iterations replayed", name, replayed)
			}
		}
	}
}

// TestLoopMemoComparison: after a new user turn, an assistant iteration
// that compares its index with the moved "last user" index (tools.jinja's
// loop.index0 > ns.last_user, as Qwen3's template does) is replayed, not
// run again, since the comparison comes out the same; the render equals a
// plain one.
func TestLoopMemoComparison(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "hftok", "testdata", "chat", "tools.jinja"))
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := jinja.Compile(string(src))
	if err != nil {
		t.Fatal(err)
	}
	msg := func(role, content string) jinja.Value {
		d := jinja.NewDict()
		d.AsDict().Set("role", jinja.NewString(role))
		d.AsDict().Set("content", jinja.NewString(content))
		return d
	}
	msgs := []jinja.Value{msg("user", "fix the tests")}
	var memo *jinja.LoopMemo
	for turn := range 8 {
		vars := map[string]jinja.Value{"messages": jinja.NewList(append([]jinja.Value(nil), msgs...)),
			"add_generation_prompt": jinja.NewBool(true), "tools": jinja.None()}
		want, err := tmpl.RenderValues(vars)
		if err != nil {
			t.Fatal(err)
		}
		got, next, err := tmpl.RenderMemo(vars, 0, memo)
		if err != nil || got != want {
			t.Fatalf("turn %d: memoized %q (%v), plain %q", turn, got, err, want)
		}
		if memo != nil {
			// Every message of the last turn's render: the main loop's
			// iterations (the reversed loop over messages[::-1] is not
			// memoized).
			if n, want := jinja.MemoReplayed(next, memo), len(msgs)-2; n != want {
				t.Fatalf("turn %d: %d iterations replayed, want %d", turn, n, want)
			}
		}
		memo = next
		msgs = append(msgs, msg("assistant", fmt.Sprintf("<think>step %d</think>done %d", turn, turn)), msg("user", fmt.Sprint("and then ", turn)))
	}
}
