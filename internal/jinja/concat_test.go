package jinja_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/agentkv/agentkv/internal/jinja"
)

// TestOutputConcat: {{ a + b ~ c ... }} written operand by operand (the
// agentkv change in eval.go's outputConcat) prints exactly what the same
// expression evaluated whole prints ({% set x = ... %}{{ x }}, evalBinary's
// fold), for random chains of + and ~ (and -, *, parentheses breaking
// them) over strings, ints, floats, lists, none and undefined values; and
// errors alike.
func TestOutputConcat(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	operands := []string{`'a'`, `"<|im_start|>"`, `'\n'`, `1`, `2`, `0.5`, `-3`, `[1]`, `['x', 2]`, `none`, `undefined_var`,
		`s`, `n`, `f`, `l`, `m.role`, `m.content`, `(1 + 2)`, `('p' ~ 3)`, `(n - 1)`, `s | upper`, `l | length`, `true`}
	ops := []string{" + ", " + ", " ~ ", " - ", " * "}
	data := map[string]any{"s": "str", "n": 7, "f": 1.25, "l": []any{3, "y"}, "m": map[string]any{"role": "user", "content": "hi\n"}}
	for i := range 3000 {
		var e strings.Builder
		e.WriteString(operands[r.IntN(len(operands))])
		for range 1 + r.IntN(6) {
			e.WriteString(ops[r.IntN(len(ops))])
			e.WriteString(operands[r.IntN(len(operands))])
		}
		expr := e.String()
		render := func(src string) (string, error) {
			tmpl, err := jinja.Compile(src)
			if err != nil {
				return "", fmt.Errorf("compile: %w", err)
			}
			return tmpl.Render(data)
		}
		got, gotErr := render("[{{ " + expr + " }}]")
		want, wantErr := render("{% set x = " + expr + " %}[{{ x }}]")
		if (gotErr != nil) != (wantErr != nil) || got != want {
			t.Fatalf("case %d: {{ %s }}: printed %q (error %v), evaluated whole %q (error %v)", i, expr, got, gotErr, want, wantErr)
		}
	}
}
