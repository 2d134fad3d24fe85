package hftok

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// Character classes as tokenizers' Oniguruma (6.9.9, Unicode 15.1) sees
// them. Go's unicode tables are Unicode 15.0; the only difference for \p{L}
// is CJK Extension I, added in 15.1 (and for \p{S}, five ideographic
// description characters).

const (
	extIFirst = 0x2EBF0 // CJK Unified Ideographs Extension I (Unicode 15.1), Lo
	extILast  = 0x2EE5D
)

const (
	clsL  = 1 << iota // \p{L}
	clsN              // \p{N}
	clsS              // \s (White_Space)
	clsNL             // \r or \n (also clsS)
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = clsL, clsL
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = clsN
	}
	for _, c := range "\t\v\f " {
		t[c] = clsS
	}
	t['\r'], t['\n'] = clsS|clsNL, clsS|clsNL
	return t
}()

func isLetter(r rune) bool {
	return unicode.IsLetter(r) || extIFirst <= r && r <= extILast
}

func classOf(r rune) uint8 {
	if r < utf8.RuneSelf {
		return asciiClass[r]
	}
	switch {
	case isLetter(r):
		return clsL
	case unicode.IsNumber(r):
		return clsN
	case unicode.IsSpace(r):
		return clsS
	}
	return 0
}

func runeAt(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// run returns the end of the run of runes of class cls from i.
func run(s string, i int, cls uint8) int {
	for i < len(s) {
		r, n := runeAt(s, i)
		if classOf(r)&cls == 0 {
			break
		}
		i += n
	}
	return i
}

// otherRun returns the end of the run of [^\s\p{L}\p{N}] from i.
func otherRun(s string, i int) int {
	for i < len(s) {
		r, n := runeAt(s, i)
		if classOf(r) != 0 {
			break
		}
		i += n
	}
	return i
}

// fastPattern is a hand-written matcher equal to a known pre-tokenizer
// regex under Oniguruma's semantics (tested against regexp2 running the
// same pattern, and against tokenizers itself). The known patterns match
// at every position, so their matches tile the text: next returns the end
// of the match that starts at i.
type fastPattern struct {
	gpt2      bool // GPT-2's pattern; else the Qwen2 / Llama 3 family
	maxDigits int  // Qwen2 family: \p{N} (1); Llama 3: \p{N}{1,3} (3)
}

// The known patterns, as tokenizer.json spells them.
const (
	patQwen2  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	patGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

var (
	gpt2          = &fastPattern{gpt2: true}
	knownPatterns = map[string]*fastPattern{
		patQwen2:  {maxDigits: 1},
		patLlama3: {maxDigits: 3},
		patGPT2:   gpt2,
	}
	// gpt2Regexp is ByteLevel's built-in pattern, for the generic path.
	gpt2Regexp = regexp2.MustCompile(rewriteOniguruma(patGPT2), regexp2.Multiline)
)

// fold is Oniguruma's case folding for the letters of the contractions:
// ASCII upper case, and U+017F LATIN SMALL LETTER LONG S, which folds to s.
func fold(r rune) rune {
	switch {
	case 'A' <= r && r <= 'Z':
		return r + 'a' - 'A'
	case r == 0x17F:
		return 's'
	}
	return r
}

// contraction matches 's|'t|'re|'ve|'m|'ll|'d after the apostrophe at
// j-1 (case-insensitively when ci) and returns its end, or -1.
func contraction(s string, j int, ci bool) int {
	if j >= len(s) {
		return -1
	}
	r1, n1 := runeAt(s, j)
	if ci {
		r1 = fold(r1)
	}
	switch r1 {
	case 's', 't', 'm', 'd':
		return j + n1
	case 'r', 'v', 'l':
		if j+n1 >= len(s) {
			return -1
		}
		r2, n2 := runeAt(s, j+n1)
		if ci {
			r2 = fold(r2)
		}
		if r2 == 'e' && r1 != 'l' || r2 == 'l' && r1 == 'l' {
			return j + n1 + n2
		}
	}
	return -1
}

// spaceRun scans the white space from i: its end, the position of the
// last \r or \n in it (-1 if none) and where its last rune starts.
func spaceRun(s string, i int) (end, lastNL, lastStart int) {
	lastNL = -1
	for i < len(s) {
		r, n := runeAt(s, i)
		c := classOf(r)
		if c&clsS == 0 {
			break
		}
		if c&clsNL != 0 {
			lastNL = i
		}
		lastStart = i
		i += n
	}
	return i, lastNL, lastStart
}

// next returns the end of the match starting at i < len(s).
func (f *fastPattern) next(s string, i int) int {
	r0, n0 := runeAt(s, i)
	c0 := classOf(r0)
	if r0 == '\'' {
		if j := contraction(s, i+1, !f.gpt2); j >= 0 {
			return j
		}
	}
	if f.gpt2 {
		// ' ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+' then the white space
		// alternatives.
		from, c := i, c0
		if r0 == ' ' && i+1 < len(s) {
			r1, _ := runeAt(s, i+1)
			if c1 := classOf(r1); c1&clsS == 0 {
				from, c = i+1, c1
			}
		}
		switch {
		case c&clsL != 0:
			return run(s, from, clsL)
		case c&clsN != 0:
			return run(s, from, clsN)
		case c == 0:
			return otherRun(s, from)
		}
		end, _, lastStart := spaceRun(s, i)
		if end < len(s) && lastStart > i { // \s+(?!\S) gives back the last space
			return lastStart
		}
		return end
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c0&clsL != 0 {
		return run(s, i+n0, clsL)
	}
	if c0&(clsN|clsNL) == 0 && i+n0 < len(s) {
		if r1, n1 := runeAt(s, i+n0); classOf(r1)&clsL != 0 {
			return run(s, i+n0+n1, clsL)
		}
	}
	// \p{N} or \p{N}{1,3}
	if c0&clsN != 0 {
		j := i + n0
		for k := 1; k < f.maxDigits && j < len(s); k++ {
			r, n := runeAt(s, j)
			if classOf(r)&clsN == 0 {
				break
			}
			j += n
		}
		return j
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	from := -1
	if c0 == 0 {
		from = i
	} else if r0 == ' ' && i+1 < len(s) {
		if r1, _ := runeAt(s, i+1); classOf(r1) == 0 {
			from = i + 1
		}
	}
	if from >= 0 {
		j := otherRun(s, from)
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	// \s*[\r\n]+ | \s+(?!\S) | \s+
	end, lastNL, lastStart := spaceRun(s, i)
	if lastNL >= 0 {
		return lastNL + 1
	}
	if end < len(s) && lastStart > i {
		return lastStart
	}
	return end
}

// compileOniguruma compiles a tokenizer.json regex (Oniguruma syntax, as
// tokenizers uses it) with regexp2, adapted to Oniguruma where they
// differ in ways tokenizers' patterns meet: ^ and $ match at line bounds
// (Ruby syntax), \p{L} and \p{S} include Unicode 15.1's additions, \w is
// Unicode's word class, and s under (?i) also matches U+017F. Other
// constructs keep regexp2's (.NET) meaning.
func compileOniguruma(pattern string) (*regexp2.Regexp, error) {
	return regexp2.Compile(rewriteOniguruma(pattern), regexp2.Multiline)
}

// Extra ranges for properties whose Unicode 15.1 (Oniguruma) set is
// larger than Go's Unicode 15.0 tables.
var propertyExtra = map[string]string{
	"L":  `\x{2EBF0}-\x{2EE5D}`,
	"Lo": `\x{2EBF0}-\x{2EE5D}`,
	"S":  `\x{2FFC}-\x{2FFF}\x{31EF}`,
	"So": `\x{2FFC}-\x{2FFF}\x{31EF}`,
}

// wordClass is Oniguruma's (and Unicode's) \w, inside brackets.
const wordClass = `\p{L}\x{2EBF0}-\x{2EE5D}\p{Nl}\p{Other_Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}`

// rewriteOniguruma rewrites the constructs compileOniguruma lists.
func rewriteOniguruma(p string) string {
	var b strings.Builder
	inClass := 0
	ci := false
	var ciStack []bool
	for i := 0; i < len(p); {
		c := p[i]
		switch {
		case c == '\\' && i+1 < len(p):
			x := p[i+1]
			if (x == 'p' || x == 'P') && i+2 < len(p) && p[i+2] == '{' {
				end := strings.IndexByte(p[i:], '}')
				if end < 0 {
					b.WriteString(p[i:])
					return b.String()
				}
				name := p[i+3 : i+end]
				esc := p[i : i+end+1]
				i += end + 1
				extra, ok := propertyExtra[name]
				switch {
				case !ok:
					b.WriteString(esc)
				case inClass > 0 && x == 'p':
					b.WriteString(esc + extra)
				case inClass > 0:
					b.WriteString(esc) // \P{..} inside brackets: left as regexp2 has it
				case x == 'p':
					b.WriteString("[" + esc + extra + "]")
				default:
					b.WriteString(`[^\p{` + name + `}` + extra + "]")
				}
				continue
			}
			switch {
			case x == 'w' && inClass > 0:
				b.WriteString(wordClass)
			case x == 'w':
				b.WriteString("[" + wordClass + "]")
			case x == 'W' && inClass == 0:
				b.WriteString("[^" + wordClass + "]")
			default:
				b.WriteString(p[i : i+2])
			}
			i += 2
			continue
		case c == '[':
			inClass++
		case c == ']' && inClass > 0:
			inClass--
		case c == '(' && inClass == 0:
			if strings.HasPrefix(p[i:], "(?") {
				j, groupCI, on := i+2, ci, true
				for j < len(p) && (p[j] == '-' || 'a' <= p[j] && p[j] <= 'z' || 'A' <= p[j] && p[j] <= 'Z') {
					switch p[j] {
					case '-':
						on = false
					case 'i':
						groupCI = on
					}
					j++
				}
				if j < len(p) && p[j] == ')' {
					// (?i) applies to the rest of the enclosing group
					ci = groupCI
					b.WriteString(p[i : j+1])
					i = j + 1
					continue
				}
				ciStack = append(ciStack, ci)
				ci = groupCI
				b.WriteString(p[i:j]) // the flags verbatim
				i = j
				continue
			}
			ciStack = append(ciStack, ci)
		case c == ')' && inClass == 0:
			if len(ciStack) > 0 {
				ci = ciStack[len(ciStack)-1]
				ciStack = ciStack[:len(ciStack)-1]
			}
		case ci && (c == 's' || c == 'S'):
			if inClass > 0 {
				b.WriteString(`s\x{17F}`)
			} else {
				b.WriteString(`[s\x{17F}]`)
			}
			i++
			continue
		}
		b.WriteByte(c)
		i++
	}
	return b.String()
}
