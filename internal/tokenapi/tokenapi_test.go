package tokenapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseIDs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []uint32
		err  string
	}{
		{in: ``, want: nil},
		{in: `null`, want: nil},
		{in: `[]`, want: nil},
		{in: ` [ 1 , 2,3 ] `, want: []uint32{1, 2, 3}},
		{in: `[0,99]`, want: []uint32{0, 99}},
		{in: `[1,-2]`, err: "token id 1 is negative"},
		{in: `[1.5]`, err: "token id 0 is not an integer"},
		{in: `[1e3]`, err: "not an integer"},
		{in: `["7"]`, err: "not an integer"},
		{in: `[true]`, err: "not an integer"},
		{in: `[[1,2]]`, err: "batch"},
		{in: `[100]`, err: "beyond the vocabulary"},
		{in: `[99999999999999999999999999]`, err: "beyond the vocabulary"},
		{in: `[1,2,3,4,5]`, err: "more than 4 token ids"},
		{in: `[1,2`, err: "unterminated"},
		{in: `[1 2]`, err: "not an integer"},
		{in: `[1],`, err: "trailing"},
		{in: `{"a":1}`, err: "want an array"},
		{in: `"1,2"`, err: "want an array"},
	} {
		got, err := ParseIDs(nil, []byte(tc.in), "input_ids", 100, 4)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, ErrIDs) {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// TestParseIDsHuge: 10 million ids stop at the bound.
func TestParseIDsHuge(t *testing.T) {
	var b bytes.Buffer
	b.WriteByte('[')
	for i := range 10_000_000 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('1')
	}
	b.WriteByte(']')
	got, err := ParseIDs(nil, b.Bytes(), "token_ids", DefaultVocab, 0)
	if err == nil || !strings.Contains(err.Error(), "more than 2097152 token ids") {
		t.Fatalf("got %v", err)
	}
	if len(got) != MaxIDs {
		t.Fatalf("parsed %d ids before refusing", len(got))
	}
}

func TestAppendIDsRoundTrip(t *testing.T) {
	ids := []uint32{0, 1, 4294967295, 42}
	got, err := ParseIDs(nil, AppendIDs(nil, ids), "x", 0, 0)
	if err != nil || !slices.Equal(got, ids) {
		t.Fatalf("got %v, %v", got, err)
	}
	if s := string(AppendIDs(nil, nil)); s != "[]" {
		t.Fatalf("empty: %s", s)
	}
}

func TestRIDString(t *testing.T) {
	for in, want := range map[string]bool{`{"rid":"a"}`: true, `{}`: true, `{"rid":null}`: true, `{"rid":["a","b"]}`: false, `{"rid":3}`: false} {
		var r GenerateRequest
		if err := json.Unmarshal([]byte(in), &r); err != nil {
			t.Fatal(err)
		}
		if _, ok := r.RIDString(); ok != want {
			t.Errorf("%s: ok %v", in, ok)
		}
	}
}

// FuzzParseIDs: ParseIDs never panics, agrees with encoding/json on what
// it accepts, and never returns more than the bound.
func FuzzParseIDs(f *testing.F) {
	for _, s := range []string{`[1,2,3]`, `[]`, `[-1]`, `[1.0]`, `[[1]]`, `[4294967296]`, ` [ 7 ] `, `[1,`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := ParseIDs(nil, raw, "f", DefaultVocab, 8)
		if len(got) > 8 {
			t.Fatalf("%d ids past the bound", len(got))
		}
		if err != nil {
			if !errors.Is(err, ErrIDs) {
				t.Fatalf("error %v does not wrap ErrIDs", err)
			}
			return
		}
		var ref []int64
		if len(bytes.TrimSpace(raw)) == 0 {
			return
		}
		if jerr := json.Unmarshal(raw, &ref); jerr != nil {
			t.Fatalf("accepted %q that encoding/json refuses: %v", raw, jerr)
		}
		if len(ref) != len(got) {
			t.Fatalf("%q: %d ids, encoding/json %d", raw, len(got), len(ref))
		}
		for i := range ref {
			if int64(got[i]) != ref[i] {
				t.Fatalf("%q: id %d is %d, want %d", raw, i, got[i], ref[i])
			}
		}
	})
}
