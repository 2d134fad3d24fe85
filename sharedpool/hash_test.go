package sharedpool

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type goldenCase struct {
	Name     string   `json:"name"`
	Tokens   []uint32 `json:"tokens"`
	PageSize int      `json:"page_size"`
	Eagle    bool     `json:"eagle"`
	Hashes   []string `json:"hashes"`
}

func loadGolden(t *testing.T) []goldenCase {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "page_hashes.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []goldenCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cases) < 10 {
		t.Fatalf("only %d golden cases", len(doc.Cases))
	}
	return doc.Cases
}

// TestPageHashesGolden checks PageHashes against vectors from Python's
// hashlib (testdata/gen_page_hashes.py).
func TestPageHashesGolden(t *testing.T) {
	for _, c := range loadGolden(t) {
		t.Run(c.Name, func(t *testing.T) {
			got := PageHashes(c.Tokens, c.PageSize, c.Eagle, nil)
			if len(got) != len(c.Hashes) {
				t.Fatalf("%d pages, want %d", len(got), len(c.Hashes))
			}
			for i := range got {
				if got[i].String() != c.Hashes[i] {
					t.Errorf("page %d: %s, want %s", i, got[i], c.Hashes[i])
				}
			}
		})
	}
}

// TestPageHashesDynamoVectors pins the vectors Dynamo's own tests assert
// (lib/llm/src/kv_router/shared_cache.rs), so all three implementations
// (SGLang via Dynamo, Python hashlib, this package) agree.
func TestPageHashesDynamoVectors(t *testing.T) {
	tests := []struct {
		tokens   []uint32
		pageSize int
		eagle    bool
		want     []string
	}{
		{[]uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 4, false, []string{
			"cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72",
			"4ebfa8a1f3c341517621838c6e1b9aa350307e3f00b3cbd1a07ef740f54396d6",
		}},
		{[]uint32{10, 11, 12, 13, 14}, 2, true, []string{
			"4bde82677ba8b6de843da1713b58a439678ec01b642bbdcffec4acfa81b0ec8e",
			"75ab93a767bad1e254945d1a0ccfa1588d6ebb803303e412d984baedcbbf04b9",
		}},
	}
	for _, tt := range tests {
		got := PageHashes(tt.tokens, tt.pageSize, tt.eagle, nil)
		if len(got) != len(tt.want) {
			t.Fatalf("%v: %d pages, want %d", tt.tokens, len(got), len(tt.want))
		}
		for i := range got {
			if got[i].String() != tt.want[i] {
				t.Errorf("%v page %d: %s, want %s", tt.tokens, i, got[i], tt.want[i])
			}
		}
	}
}

func TestHashPageChains(t *testing.T) {
	tokens := make([]uint32, 40)
	for i := range tokens {
		tokens[i] = uint32(i * 7919)
	}
	pages := PageHashes(tokens, 8, false, nil)
	if len(pages) != 5 {
		t.Fatalf("%d pages", len(pages))
	}
	var prev *PageHash
	for i := range pages {
		h := HashPage(prev, tokens[i*8:(i+1)*8])
		if h != pages[i] {
			t.Fatalf("page %d: HashPage %s, PageHashes %s", i, h, pages[i])
		}
		prev = &pages[i]
	}
	// Appending keeps dst's prefix.
	dst := []PageHash{{1}}
	if got := PageHashes(tokens, 8, false, dst); got[0] != (PageHash{1}) || got[1] != pages[0] {
		t.Error("PageHashes does not append to dst")
	}
	if got := PageHashes(tokens, 0, false, nil); got != nil {
		t.Error("page size 0 yields pages")
	}
}

func TestParsePageHash(t *testing.T) {
	h := PageHashes([]uint32{1, 2, 3, 4}, 4, false, nil)[0]
	got, err := ParsePageHash(h.String())
	if err != nil || got != h {
		t.Fatalf("round trip: %v %v", got, err)
	}
	for _, bad := range []string{
		"", "00", h.String()[:63], h.String() + "0",
		"CF97ADEEDB59E05BFD73A2B4C2A8885708C4F4F70C84C64B27120E72AB733B72",
		"zz97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72",
	} {
		if _, err := ParsePageHash(bad); !errors.Is(err, ErrInvalidPageHash) {
			t.Errorf("%q: err %v", bad, err)
		}
	}
}

// TestHexWords checks the eight-at-a-time decoder against the byte table
// decoder: every byte value at every position of a valid digest, and
// random digests.
func TestHexWords(t *testing.T) {
	check := func(s string) {
		t.Helper()
		var h PageHash
		wantOK := decodeLowerHex(&h, s)
		d, ok := hexWords(s)
		if ok != wantOK || (ok && d != h.words()) {
			t.Fatalf("hexWords(%q) = %x, %v; want %x, %v", s, d, ok, h.words(), wantOK)
		}
	}
	for _, p := range randomPages(64, 8) {
		check(p.String())
	}
	base := []byte(randomPages(1, 9)[0].String())
	for pos := range base {
		orig := base[pos]
		for c := range 256 {
			base[pos] = byte(c)
			check(string(base))
		}
		base[pos] = orig
	}
	for _, s := range []string{"", "0", strings.Repeat("0", 63), strings.Repeat("0", 65), strings.Repeat("f", 64), strings.Repeat("F", 64)} {
		check(s)
	}
}
