package sharedpool

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

const hexH = "cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72"

func mustHash(t testing.TB, s string) PageHash {
	t.Helper()
	h, err := ParsePageHash(s)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// keysFor abbreviates expected keys: "H" stands for the page hash.
func keysFor(tmpl ...string) []string {
	out := make([]string, len(tmpl))
	for i, s := range tmpl {
		out[i] = strings.ReplaceAll(s, "H", hexH)
	}
	return out
}

func TestLayoutExpansion(t *testing.T) {
	tests := []struct {
		name   string
		layout Layout
		want   []string
	}{
		{"MLA PP1 uses the double underscore", Layout{PageSize: 64, MLA: true}, keysFor("H__k")},
		{"MLA PP2", Layout{PageSize: 64, MLA: true, PPSize: 2}, keysFor("H_0_k", "H_1_k")},
		{"MLA ignores TP", Layout{PageSize: 64, MLA: true, TPSize: 8}, keysFor("H__k")},
		{"MLA ignores split heads", Layout{PageSize: 64, MLA: true, TPSize: 2, TPLCMSize: 4, SplitHeads: true}, keysFor("H__k")},
		{"MLA tagged", Layout{PageSize: 64, MLA: true, ExtraBackendTag: "prod"}, keysFor("prod_H__k")},
		{"TP1", Layout{PageSize: 64, TPSize: 1}, keysFor("H_0_k", "H_0_v")},
		{"TP0 means 1", Layout{PageSize: 64}, keysFor("H_0_k", "H_0_v")},
		{"TP2", Layout{PageSize: 64, TPSize: 2}, keysFor("H_0_k", "H_0_v", "H_1_k", "H_1_v")},
		{"TP4", Layout{PageSize: 64, TPSize: 4}, keysFor("H_0_k", "H_0_v", "H_1_k", "H_1_v", "H_2_k", "H_2_v", "H_3_k", "H_3_v")},
		{"TP8", Layout{PageSize: 64, TPSize: 8}, keysFor(
			"H_0_k", "H_0_v", "H_1_k", "H_1_v", "H_2_k", "H_2_v", "H_3_k", "H_3_v",
			"H_4_k", "H_4_v", "H_5_k", "H_5_v", "H_6_k", "H_6_v", "H_7_k", "H_7_v")},
		{"TP1 PP2", Layout{PageSize: 64, PPSize: 2}, keysFor("H_0_0_k", "H_0_0_v", "H_0_1_k", "H_0_1_v")},
		// Dynamo's test_required_page_keys_for_mha_tp_pp_layout.
		{"TP2 PP2", Layout{PageSize: 64, TPSize: 2, PPSize: 2}, keysFor(
			"H_0_0_k", "H_0_0_v", "H_1_0_k", "H_1_0_v", "H_0_1_k", "H_0_1_v", "H_1_1_k", "H_1_1_v")},
		// Dynamo's test_required_page_keys_for_split_heads.
		{"split heads TP2 LCM4 tagged", Layout{PageSize: 64, TPSize: 2, TPLCMSize: 4, SplitHeads: true, ExtraBackendTag: "tag"}, keysFor(
			"tag_H_0_k", "tag_H_0_v", "tag_H_1_k", "tag_H_1_v", "tag_H_2_k", "tag_H_2_v", "tag_H_3_k", "tag_H_3_v")},
		{"split heads TP4 LCM4 is plain TP4", Layout{PageSize: 64, TPSize: 4, TPLCMSize: 4, SplitHeads: true}, keysFor(
			"H_0_k", "H_0_v", "H_1_k", "H_1_v", "H_2_k", "H_2_v", "H_3_k", "H_3_v")},
		{"split heads without LCM is plain TP", Layout{PageSize: 64, TPSize: 2, SplitHeads: true}, keysFor("H_0_k", "H_0_v", "H_1_k", "H_1_v")},
		{"LCM without split heads is ignored", Layout{PageSize: 64, TPSize: 2, TPLCMSize: 8}, keysFor("H_0_k", "H_0_v", "H_1_k", "H_1_v")},
		{"split heads TP1 LCM2 PP2", Layout{PageSize: 64, TPSize: 1, TPLCMSize: 2, SplitHeads: true, PPSize: 2}, keysFor(
			"H_0_0_k", "H_0_0_v", "H_1_0_k", "H_1_0_v", "H_0_1_k", "H_0_1_v", "H_1_1_k", "H_1_1_v")},
		{"tag", Layout{PageSize: 64, ExtraBackendTag: "prod"}, keysFor("prod_H_0_k", "prod_H_0_v")},
		{"tag with underscores", Layout{PageSize: 64, ExtraBackendTag: "a_b"}, keysFor("a_b_H_0_k", "a_b_H_0_v")},
		// SGLang's test_model_and_backend_tag_still_prefix_keys: "prod_org-model_page0_0_k".
		{"key prefix overrides the tag", Layout{PageSize: 64, ExtraBackendTag: "prod", KeyPrefix: "prod_org-model"}, keysFor("prod_org-model_H_0_k", "prod_org-model_H_0_v")},
	}
	h := mustHash(t, hexH)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.layout.Validate(); err != nil {
				t.Fatal(err)
			}
			got := tt.layout.AppendObjectKeys(nil, h)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("keys\n got %q\nwant %q", got, tt.want)
			}
			if n := tt.layout.ObjectsPerPage(); n != len(tt.want) {
				t.Errorf("ObjectsPerPage %d, want %d", n, len(tt.want))
			}
			// Every key parses back to its page and slot; the set is unique.
			sch, err := compile(tt.layout)
			if err != nil {
				t.Fatal(err)
			}
			for i, k := range got {
				ph, s, ok := sch.parse(k)
				if !ok || ph != h || s != i {
					t.Errorf("parse(%q) = %v %d %v, want slot %d", k, ph, s, ok, i)
				}
				if !sch.groupMatches(tt.layout.GroupID(h), k) {
					t.Errorf("group %q does not match %q", tt.layout.GroupID(h), k)
				}
			}
		})
	}
}

func TestGroupID(t *testing.T) {
	h := mustHash(t, hexH)
	// Dynamo's test_sglang_group_id_uses_extra_backend_tag and SGLang's
	// _make_group_id(tagged logical key).
	if g := (Layout{PageSize: 4, ExtraBackendTag: "tag"}).GroupID(h); g != "sglang-hicache:tag_"+hexH {
		t.Errorf("tagged group %q", g)
	}
	if g := (Layout{PageSize: 4}).GroupID(h); g != "sglang-hicache:"+hexH {
		t.Errorf("group %q", g)
	}
}

func TestParseRejectsForeignKeys(t *testing.T) {
	sch, err := compile(Layout{PageSize: 4, TPSize: 2, ExtraBackendTag: "tag"})
	if err != nil {
		t.Fatal(err)
	}
	upper := strings.ToUpper(hexH)
	for _, k := range []string{
		"", "tag_", "tag_" + hexH, "tag_" + hexH + "_",
		"tag_" + hexH + "_2_k", // rank out of range
		"tag_" + hexH + "_0_x",
		"tag_" + hexH + "_0_k_", // trailing
		"tag_" + hexH + "__k",   // MLA form under an MHA layout
		"tag_" + hexH + "_0_0_k",
		"tag_" + upper + "_0_k",
		"tag_" + hexH[:63] + "_0_k",
		hexH + "_0_k",            // missing tag
		"other_" + hexH + "_0_k", // other tag
		"tag_x" + hexH + "_0_k",  // tag not followed by the hash
		"tag_" + hexH + "_0_draft_k",
		"tag_" + hexH + "_00_k",
	} {
		if _, _, ok := sch.parse(k); ok {
			t.Errorf("parse(%q) accepted a key the layout never writes", k)
		}
	}
}

func TestLayoutValidate(t *testing.T) {
	tests := []struct {
		name   string
		layout Layout
		want   error
	}{
		{"zero page size", Layout{}, ErrInvalidLayout},
		{"negative page size", Layout{PageSize: -1}, ErrInvalidLayout},
		{"negative tp", Layout{PageSize: 4, TPSize: -2}, ErrInvalidLayout},
		{"negative pp", Layout{PageSize: 4, PPSize: -1}, ErrInvalidLayout},
		{"lcm not a multiple", Layout{PageSize: 4, TPSize: 4, TPLCMSize: 6, SplitHeads: true}, ErrInvalidLayout},
		{"too many objects", Layout{PageSize: 4, TPSize: 64, PPSize: 64}, ErrInvalidLayout},
		{"other backend", Layout{PageSize: 4, Backend: "3fs"}, ErrUnsupportedBackend},
		{"mooncake", Layout{PageSize: 4, Backend: "mooncake"}, nil},
		{"lcm not a multiple without split heads", Layout{PageSize: 4, TPSize: 4, TPLCMSize: 6}, nil},
	}
	for _, tt := range tests {
		if err := tt.layout.Validate(); !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestCheckPageSize(t *testing.T) {
	l := Layout{PageSize: 64}
	if err := l.CheckPageSize(64); err != nil {
		t.Error(err)
	}
	if err := l.CheckPageSize(16); !errors.Is(err, ErrPageSizeMismatch) {
		t.Errorf("mismatch not reported: %v", err)
	}
}

func TestConsensus(t *testing.T) {
	a := Layout{PageSize: 64, TPSize: 2}
	got, err := Consensus(map[uint64]Layout{7: a, 3: {PageSize: 64, TPSize: 2, PPSize: 1, Backend: "mooncake"}})
	if err != nil || !got.Equal(a) {
		t.Fatalf("agreeing workers: %+v %v", got, err)
	}
	if _, err := Consensus(nil); !errors.Is(err, ErrNoLayout) {
		t.Errorf("no workers: %v", err)
	}
	_, err = Consensus(map[uint64]Layout{9: a, 2: {PageSize: 64, TPSize: 4}, 5: a})
	var me *MismatchError
	if !errors.As(err, &me) || !errors.Is(err, ErrLayoutMismatch) {
		t.Fatalf("mismatch: %v", err)
	}
	if me.WorkerA != 2 || me.WorkerB != 5 || me.Field != "tp_size" {
		t.Errorf("mismatch detail %+v", me)
	}
	if _, err := Consensus(map[uint64]Layout{1: a, 4: {PageSize: 0}}); !errors.Is(err, ErrInvalidLayout) || !strings.Contains(err.Error(), "worker 4") {
		t.Errorf("invalid worker layout: %v", err)
	}
	for _, f := range []struct {
		b     Layout
		field string
	}{
		{Layout{PageSize: 32, TPSize: 2}, "page_size"},
		{Layout{PageSize: 64, TPSize: 2, MLA: true}, "is_mla_model"},
		{Layout{PageSize: 64, TPSize: 2, Eagle: true}, "is_eagle"},
		{Layout{PageSize: 64, TPSize: 2, PPSize: 2}, "pp_size"},
		{Layout{PageSize: 64, TPSize: 2, TPLCMSize: 4}, "tp_lcm_size"},
		{Layout{PageSize: 64, TPSize: 2, SplitHeads: true}, "should_split_heads"},
		{Layout{PageSize: 64, TPSize: 2, ExtraBackendTag: "x"}, "extra_backend_tag"},
		{Layout{PageSize: 64, TPSize: 2, KeyPrefix: "x_m"}, "key_prefix"},
	} {
		_, err := Consensus(map[uint64]Layout{1: a, 2: f.b})
		if !errors.As(err, &me) || me.Field != f.field {
			t.Errorf("%s: %v", f.field, err)
		}
	}
}

// TestParseMatchesSuffixSet compares the arithmetic suffix parser with the
// plain definition (the set of the layout's suffixes) on every canonical
// key and on near misses: each suffix character replaced, dropped or
// doubled, extra digits, leading zeros.
func TestParseMatchesSuffixSet(t *testing.T) {
	layouts := []Layout{
		{PageSize: 1, MLA: true},
		{PageSize: 1, MLA: true, PPSize: 3},
		{PageSize: 1, MLA: true, PPSize: 12, ExtraBackendTag: "t"},
		{PageSize: 1, TPSize: 1},
		{PageSize: 1, TPSize: 2, PPSize: 2},
		{PageSize: 1, TPSize: 12, PPSize: 11, KeyPrefix: "a_b"},
		{PageSize: 1, TPSize: 2, TPLCMSize: 12, SplitHeads: true},
	}
	h := randomPages(1, 5)[0]
	repl := "_0123456789kvxK-"
	for _, l := range layouts {
		sch, err := compile(l)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int{}
		for i, s := range l.Suffixes() {
			want[s] = i
		}
		logical := l.LogicalKey(h)
		check := func(suf string) {
			t.Helper()
			gotH, gotSlot, ok := sch.parse(logical + suf)
			wantSlot, wantOK := want[suf]
			if ok != wantOK || (ok && (gotSlot != wantSlot || gotH != h)) {
				t.Fatalf("%+v: parse(...%q) = slot %d, %v; want %d, %v", l, suf, gotSlot, ok, wantSlot, wantOK)
			}
		}
		for s := range want {
			check(s)
			for i := range len(s) + 1 {
				check(s[:i] + s[min(i+1, len(s)):])
				check(s[:i] + "0" + s[i:])
				check(s[:i] + "99999" + s[i:])
				if i < len(s) {
					check(s[:i] + s[i:i+1] + s[i:])
					for _, c := range repl {
						check(s[:i] + string(c) + s[i+1:])
					}
				}
			}
		}
	}
}
