package hftok

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/agentkv/agentkv/internal/jinja"

	"github.com/stretchr/testify/require"
)

// canon prints a template value with everything parseJSON decides: kinds
// (int or float), key order, repeated keys' values.
func canon(v jinja.Value) string {
	switch {
	case v.IsNone():
		return "null"
	case v.IsBool():
		return strconv.FormatBool(v.AsBool())
	case v.IsInt():
		return "i" + strconv.FormatInt(v.AsInt(), 10)
	case v.IsFloat():
		return "f" + strconv.FormatFloat(v.AsFloat(), 'g', -1, 64)
	case v.IsString():
		return strconv.Quote(v.AsString())
	case v.IsList():
		var b strings.Builder
		b.WriteByte('[')
		for _, e := range v.AsList().Items {
			b.WriteString(canon(e))
			b.WriteByte(',')
		}
		return b.String() + "]"
	case v.IsDict():
		var b strings.Builder
		b.WriteByte('{')
		d := v.AsDict()
		for _, k := range d.Keys {
			b.WriteString(strconv.Quote(k) + ":" + canon(d.Data[k]) + ",")
		}
		return b.String() + "}"
	}
	return "undefined"
}

// checkMemoParse parses body from prev's memo and checks the result (value
// or error) equals a plain parse's; it returns the new memo.
func checkMemoParse(t *testing.T, prev *parseMemo, body []byte, minEq int) (jinja.Value, *parseMemo) {
	t.Helper()
	want, wantErr := parseJSON(body)
	got, memo, err := memoParseMin(body, prev, true, minEq)
	if wantErr != nil {
		require.EqualError(t, err, wantErr.Error(), "%q", body)
		require.Nil(t, memo)
		return got, nil
	}
	require.NoError(t, err, "%q", body)
	require.Equal(t, canon(want), canon(got), "%q", body)
	require.Equal(t, string(body), string(memo.body))
	return got, memo
}

// dictPtr is the identity of a decoded object (reused values keep it).
func dictPtr(v jinja.Value) *jinja.Dict {
	if !v.IsDict() {
		return nil
	}
	return v.AsDict()
}

// TestMemoParseReusesTurns: an agent's growing conversation parsed turn by
// turn from the previous turn's memo equals a plain parse on every turn,
// and takes every earlier message (and a long "tools" written after
// "messages") from the memo rather than decoding it again; so does a body
// whose start changed (the byte-equal path); a malformed next body fails
// as a plain parse does.
func TestMemoParseReusesTurns(t *testing.T) {
	tools := `[{"type":"function","function":{"name":"read_file","description":"` + strings.Repeat("Reads a file. ", 40) + `","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}]`
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	for _, layout := range []string{"tools-after", "tools-before", "no-tools"} {
		t.Run(layout, func(t *testing.T) {
			msgs := []msg{{"system", "You are a coding agent."}}
			var prev *parseMemo
			var prevMsgs []*jinja.Dict
			var prevTools *jinja.Dict
			for turn := 0; turn < 12; turn++ {
				msgs = append(msgs, msg{"user", fmt.Sprintf("turn %d: read \"dir%d/a.go\"\n\tplease ✓", turn, turn)})
				mj, err := json.Marshal(msgs)
				require.NoError(t, err)
				var body string
				switch layout {
				case "tools-after":
					body = `{"model":"m","messages":` + string(mj) + `,"tools":` + tools + `,"stream":true}`
				case "tools-before":
					body = `{"model":"m","tools":` + tools + `,"messages":` + string(mj) + `}`
				default:
					body = `{"messages":` + string(mj) + `,"max_tokens":64}`
				}
				if turn == 6 { // the system prompt changed: no common prefix past it
					msgs[0].Content = "You are a careful coding agent."
					mj, _ = json.Marshal(msgs)
					body = strings.Replace(body, `"You are a coding agent."`, `"You are a careful coding agent."`, 1)
				}
				v, memo := checkMemoParse(t, prev, []byte(body), 0)
				d := v.AsDict()
				items := d.Data["messages"].AsList().Items
				for i := 1; i < len(prevMsgs); i++ { // message 0 changed at turn 6
					require.Same(t, prevMsgs[i], dictPtr(items[i]), "turn %d: message %d decoded again", turn, i)
				}
				if tv, ok := d.Data["tools"]; ok {
					td := dictPtr(tv.AsList().Items[0])
					if prevTools != nil {
						require.Same(t, prevTools, td, "turn %d: tools decoded again", turn)
					}
					prevTools = td
				}
				prevMsgs = prevMsgs[:0]
				for _, it := range items {
					prevMsgs = append(prevMsgs, dictPtr(it))
				}
				prev = memo
				msgs = append(msgs, msg{"assistant", "a.go"})
			}
			// Malformed next bodies fail as a plain parse does.
			for _, bad := range []string{string(prev.body[:len(prev.body)-1]), string(prev.body) + "x", `{"messages":[1,]}`, `{"messages":` + `[{"role":"user","content":"\x"}]}`} {
				checkMemoParse(t, prev, []byte(bad), 0)
			}
		})
	}
}

// FuzzMemoParse: for any two bodies, parsing the second from the first's
// memo (reusing by byte equality at any length) equals a plain parse.
func FuzzMemoParse(f *testing.F) {
	for _, c := range [][2]string{
		{`{"messages":[{"role":"user","content":"hi"}],"tools":[1]}`, `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"}],"tools":[1]}`},
		{`{"model":"m","messages":[{"a":"\""}]}`, `{"model":"n","messages":[{"a":"\""}]}`},
		{`{"messages":[1,2],"messages":[3]}`, `{"messages":[1,2],"messages":[3,4]}`},
		{`{"messages":[12]}`, `{"messages":[123]}`},
		{`{"messages":[{"x":1}]}`, `{"messages":[{"x":1}x]}`},
	} {
		f.Add([]byte(c[0]), []byte(c[1]))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		_, ma, err := memoParseMin(a, nil, true, 0)
		if err != nil {
			return
		}
		_, mb := checkMemoParse(t, ma, b, 0)
		checkMemoParse(t, ma, b, minEqualScan)
		if mb != nil {
			checkMemoParse(t, mb, a, 0)
		}
	})
}
