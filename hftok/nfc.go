package hftok

import (
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// NFC as tokenizers computes it: the crate unicode-normalization-alignments
// 0.1.12, whose tables are Unicode 9.0.0 (nfc9_tables.go). Code points
// assigned later are inert there (class 0, no decomposition, no
// composition), so golang.org/x/text/unicode/norm (Unicode 15) would give
// different results for them, and it also breaks runs of more than 30
// combining marks with U+034F, which tokenizers does not. This is a port of
// that crate's canonical decomposition, stable reordering and
// recomposition.

const (
	nfcNo    = 1 << iota // has a decomposition and is not a composite: never in NFC
	nfcMaybe             // may compose with what precedes it
)

// nfcData is the Unicode 9.0.0 data, built on first use; read-only after.
type nfcData struct {
	bmpCCC   [0x10000]uint8
	bmpFlags [0x10000]uint8
	ccc      map[rune]uint8 // above the BMP
	flags    map[rune]uint8 // above the BMP
	decomp   map[rune][]rune
	compose  map[uint64]rune
}

var (
	nfcOnce sync.Once
	nfc9    *nfcData
)

func nfcTables() *nfcData {
	nfcOnce.Do(func() {
		d := &nfcData{ccc: map[rune]uint8{}, flags: map[rune]uint8{}, decomp: map[rune][]rune{}, compose: map[uint64]rune{}}
		for _, kv := range nfc9CCC {
			r, c := rune(kv>>8), uint8(kv)
			if r < 0x10000 {
				d.bmpCCC[r] = c
			} else {
				d.ccc[r] = c
			}
		}
		setFlag := func(r rune, f uint8) {
			if r < 0x10000 {
				d.bmpFlags[r] |= f
			} else {
				d.flags[r] |= f
			}
		}
		composite := map[rune]bool{}
		for i := 0; i < len(nfc9Compose); i += 3 {
			a, b, c := rune(nfc9Compose[i]), rune(nfc9Compose[i+1]), rune(nfc9Compose[i+2])
			d.compose[uint64(a)<<32|uint64(b)] = c
			composite[c] = true
			setFlag(b, nfcMaybe)
		}
		for i := 0; i < len(nfc9Decomp); {
			r, n := rune(nfc9Decomp[i]>>4), int(nfc9Decomp[i]&15)
			ds := make([]rune, n)
			for j := range ds {
				ds[j] = rune(nfc9Decomp[i+1+j])
			}
			d.decomp[r] = ds
			if !composite[r] {
				setFlag(r, nfcNo)
			}
			i += 1 + n
		}
		for r := rune(hangulVBase); r < hangulVBase+hangulVCount; r++ {
			setFlag(r, nfcMaybe)
		}
		for r := rune(hangulTBase + 1); r < hangulTBase+hangulTCount; r++ {
			setFlag(r, nfcMaybe)
		}
		nfc9 = d
	})
	return nfc9
}

const (
	hangulSBase  = 0xAC00
	hangulLBase  = 0x1100
	hangulVBase  = 0x1161
	hangulTBase  = 0x11A7
	hangulLCount = 19
	hangulVCount = 21
	hangulTCount = 28
	hangulNCount = hangulVCount * hangulTCount
	hangulSCount = hangulLCount * hangulNCount
)

func (d *nfcData) class(r rune) uint8 {
	if r < 0x10000 {
		return d.bmpCCC[r]
	}
	return d.ccc[r]
}

func (d *nfcData) flag(r rune) uint8 {
	if r < 0x10000 {
		return d.bmpFlags[r]
	}
	return d.flags[r]
}

// isNFC is the quick check of UAX #15: true only if s is in NFC.
func (d *nfcData) isNFC(s string) bool {
	var last uint8
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			last = 0
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		if d.flag(r) != 0 {
			return false
		}
		c := d.class(r)
		if c != 0 && last > c {
			return false
		}
		last = c
	}
	return true
}

// nfc9String returns the NFC of s with tokenizers' Unicode 9.0.0 data.
func nfc9String(s string) string {
	d := nfcTables()
	if d.isNFC(s) {
		return s
	}
	return d.normalize(s)
}

type cccRune struct {
	r rune
	c uint8
}

func (d *nfcData) decompose(buf []cccRune, r rune) []cccRune {
	if r < utf8.RuneSelf {
		return append(buf, cccRune{r, 0})
	}
	if r >= hangulSBase && r < hangulSBase+hangulSCount {
		si := r - hangulSBase
		buf = append(buf, cccRune{hangulLBase + si/hangulNCount, 0}, cccRune{hangulVBase + (si%hangulNCount)/hangulTCount, 0})
		if ti := si % hangulTCount; ti > 0 {
			buf = append(buf, cccRune{hangulTBase + ti, 0})
		}
		return buf
	}
	if ds, ok := d.decomp[r]; ok {
		for _, x := range ds {
			buf = append(buf, cccRune{x, d.class(x)})
		}
		return buf
	}
	return append(buf, cccRune{r, d.class(r)})
}

func (d *nfcData) composePair(a, b rune) (rune, bool) {
	if a >= hangulLBase && a < hangulLBase+hangulLCount && b >= hangulVBase && b < hangulVBase+hangulVCount {
		return hangulSBase + (a-hangulLBase)*hangulNCount + (b-hangulVBase)*hangulTCount, true
	}
	if a >= hangulSBase && a < hangulSBase+hangulSCount && (a-hangulSBase)%hangulTCount == 0 &&
		b > hangulTBase && b < hangulTBase+hangulTCount {
		return a + (b - hangulTBase), true
	}
	c, ok := d.compose[uint64(a)<<32|uint64(b)]
	return c, ok
}

// sortPending stably sorts by class the characters after the last
// starter (a starter, class 0, stays first).
func sortPending(p []cccRune) {
	if len(p) < 2 {
		return
	}
	if len(p) <= 32 {
		for i := 1; i < len(p); i++ {
			for j := i; j > 0 && p[j-1].c > p[j].c; j-- {
				p[j-1], p[j] = p[j], p[j-1]
			}
		}
		return
	}
	slices.SortStableFunc(p, func(a, b cccRune) int { return int(a.c) - int(b.c) })
}

// normalize is the crate's Recompositions over Decompositions.
func (d *nfcData) normalize(s string) string {
	buf := make([]cccRune, 0, len(s)+8)
	pending := 0
	for _, r := range s {
		n := len(buf)
		buf = d.decompose(buf, r)
		for i := n; i < len(buf); i++ {
			if buf[i].c == 0 {
				// a starter: everything pending before it is final
				sortPending(buf[pending:i])
				pending = i
			}
		}
	}
	sortPending(buf[pending:])

	var out strings.Builder
	out.Grow(len(s))
	var held []rune // the crate's buffer: uncomposed marks after the composee
	composee, haveComposee := rune(0), false
	lastCCC, haveLast := uint8(0), false
	for _, x := range buf {
		ch, cls := x.r, x.c
		if !haveComposee {
			if cls != 0 {
				out.WriteRune(ch)
				continue
			}
			composee, haveComposee = ch, true
			continue
		}
		if !haveLast {
			if r, ok := d.composePair(composee, ch); ok {
				composee = r
				continue
			}
			if cls == 0 {
				out.WriteRune(composee)
				composee = ch
				continue
			}
			held = append(held, ch)
			lastCCC, haveLast = cls, true
			continue
		}
		if lastCCC >= cls {
			if cls == 0 {
				out.WriteRune(composee)
				for _, h := range held {
					out.WriteRune(h)
				}
				held = held[:0]
				composee = ch
				haveLast = false
				continue
			}
			held = append(held, ch)
			lastCCC = cls
			continue
		}
		if r, ok := d.composePair(composee, ch); ok {
			composee = r
			continue
		}
		held = append(held, ch)
		lastCCC = cls
	}
	if haveComposee {
		out.WriteRune(composee)
	}
	for _, h := range held {
		out.WriteRune(h)
	}
	return out.String()
}
