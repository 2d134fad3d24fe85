package hftok

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// The pre-tokenizer: tokenizer.json's pre_tokenizer flattened into steps
// applied to each piece in turn (tokenizers applies each step to every
// piece, then the next step; as every step treats pieces independently,
// depth first gives the same pieces in the same order). The last step is
// ByteLevel, whose pieces go to the BPE model as raw bytes.

type stepKind uint8

const (
	stepSplit stepKind = iota
	stepDigits
	stepByteLevel
)

// splitBehavior is tokenizers' SplitDelimiterBehavior.
type splitBehavior uint8

const (
	behaviorIsolated splitBehavior = iota
	behaviorRemoved
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

var behaviors = map[string]splitBehavior{
	"Isolated":           behaviorIsolated,
	"Removed":            behaviorRemoved,
	"MergedWithPrevious": behaviorMergedWithPrevious,
	"MergedWithNext":     behaviorMergedWithNext,
	"Contiguous":         behaviorContiguous,
}

type preStep struct {
	kind stepKind

	// stepSplit: the pattern is one of fast (a hand-written matcher of a
	// known pattern), literal (a String pattern) or re (a Regex pattern).
	fast     *fastPattern
	literal  string
	re       *regexp2.Regexp
	behavior splitBehavior
	invert   bool

	individualDigits bool // stepDigits

	addPrefixSpace bool // stepByteLevel
	useRegex       bool // stepByteLevel: split with GPT-2's pattern first
}

type preJSON struct {
	Type             string            `json:"type"`
	Pretokenizers    []json.RawMessage `json:"pretokenizers"`
	Pattern          *patternJSON      `json:"pattern"`
	Behavior         string            `json:"behavior"`
	Invert           bool              `json:"invert"`
	IndividualDigits bool              `json:"individual_digits"`
	AddPrefixSpace   bool              `json:"add_prefix_space"`
	UseRegex         *bool             `json:"use_regex"`
}

type patternJSON struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

// maxPreSteps bounds the flattened pre-tokenizer (and so the recursion of
// preTokenize) against hostile files.
const maxPreSteps = 64

func parsePreTokenizer(raw json.RawMessage) ([]preStep, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, errorf("pre_tokenizer is null; only byte-level BPE is supported")
	}
	var steps []preStep
	if err := flattenPre(raw, &steps, 0); err != nil {
		return nil, err
	}
	for i, s := range steps {
		if s.kind == stepByteLevel && i != len(steps)-1 {
			return nil, errorf("pre_tokenizer: ByteLevel must be the last step")
		}
	}
	if len(steps) == 0 || steps[len(steps)-1].kind != stepByteLevel {
		return nil, errorf("pre_tokenizer has no ByteLevel step; only byte-level BPE is supported")
	}
	return steps, nil
}

func flattenPre(raw json.RawMessage, steps *[]preStep, depth int) error {
	if depth > maxPreSteps {
		return errorf("pre_tokenizer: nested too deeply")
	}
	var p preJSON
	if err := json.Unmarshal(raw, &p); err != nil {
		return errorf("pre_tokenizer: %v", err)
	}
	if p.Type != "Sequence" && len(*steps) >= maxPreSteps {
		return errorf("pre_tokenizer: more than %d steps", maxPreSteps)
	}
	switch p.Type {
	case "Sequence":
		for _, sub := range p.Pretokenizers {
			if err := flattenPre(sub, steps, depth+1); err != nil {
				return err
			}
		}
	case "ByteLevel":
		s := preStep{kind: stepByteLevel, addPrefixSpace: p.AddPrefixSpace, useRegex: p.UseRegex == nil || *p.UseRegex}
		*steps = append(*steps, s)
	case "Digits":
		*steps = append(*steps, preStep{kind: stepDigits, individualDigits: p.IndividualDigits})
	case "Split":
		b, ok := behaviors[p.Behavior]
		if !ok {
			return errorf("pre_tokenizer: Split behavior %q is not supported", p.Behavior)
		}
		s := preStep{kind: stepSplit, behavior: b, invert: p.Invert}
		switch {
		case p.Pattern == nil || (p.Pattern.String == nil) == (p.Pattern.Regex == nil):
			return errorf("pre_tokenizer: Split needs one String or Regex pattern")
		case p.Pattern.String != nil:
			s.literal = *p.Pattern.String
		default:
			s.fast = knownPatterns[*p.Pattern.Regex]
			re, err := compileOniguruma(*p.Pattern.Regex)
			if err != nil {
				return errorf("pre_tokenizer: Split pattern %q: %v", *p.Pattern.Regex, err)
			}
			s.re = re
		}
		*steps = append(*steps, s)
	default:
		return errorf("pre_tokenizer %q is not supported (only ByteLevel, Split, Digits and Sequence)", p.Type)
	}
	return nil
}

// encodeState carries one segment's encoding through the pipeline.
type encodeState struct {
	t       *Tokenizer
	dst     []uint32
	generic bool // tests: use regexp2 even where a fast matcher exists
	noCache bool // tests: bypass the word cache
	scratch wordScratch
}

// preTokenize runs steps i.. on piece s and BPE-encodes the resulting
// pieces.
func (st *encodeState) preTokenize(i int, s string) {
	if s == "" {
		return
	}
	p := &st.t.pre[i]
	switch p.kind {
	case stepByteLevel:
		if p.addPrefixSpace && s[0] != ' ' {
			s = " " + s
		}
		if !p.useRegex {
			st.word(s)
			return
		}
		if st.generic {
			for _, sp := range findRegexp(gpt2Regexp, s) {
				st.word(s[sp.start:sp.end])
			}
			return
		}
		for j := 0; j < len(s); {
			k := gpt2.next(s, j)
			st.word(s[j:k])
			j = k
		}
	case stepSplit:
		if p.fast != nil && !st.generic && p.behavior == behaviorIsolated {
			for j := 0; j < len(s); {
				k := p.fast.next(s, j)
				st.preTokenize(i+1, s[j:k])
				j = k
			}
			return
		}
		var spans []span
		switch {
		case p.fast != nil && !st.generic:
			for j := 0; j < len(s); {
				k := p.fast.next(s, j)
				spans = append(spans, span{j, k, true})
				j = k
			}
		case p.re != nil:
			spans = findRegexp(p.re, s)
		default:
			spans = findLiteral(p.literal, s)
		}
		if p.invert {
			for k := range spans {
				spans[k].match = !spans[k].match
			}
		}
		for _, sp := range applyBehavior(spans, p.behavior) {
			st.preTokenize(i+1, s[sp.start:sp.end])
		}
	case stepDigits:
		spans := findDigits(s)
		b := behaviorContiguous
		if p.individualDigits {
			b = behaviorIsolated
		}
		for _, sp := range applyBehavior(spans, b) {
			st.preTokenize(i+1, s[sp.start:sp.end])
		}
	}
}

// span is a piece of a string; match tells a pattern match from the text
// between matches (in applyBehavior's result: whether to drop it).
type span struct {
	start, end int
	match      bool
}

// findRegexp is tokenizers' Pattern::find_matches for a regex: the
// matches and the text between them, covering s. Empty matches give
// empty pieces, which are dropped later, so how an engine steps past them
// does not matter.
func findRegexp(re *regexp2.Regexp, s string) []span {
	runes := []rune(s)
	offs := make([]int, len(runes)+1)
	o := 0
	for i, r := range runes {
		offs[i] = o
		o += utf8.RuneLen(r)
	}
	offs[len(runes)] = o
	var spans []span
	prev := 0
	m, err := re.FindRunesMatch(runes)
	for err == nil && m != nil {
		start, end := offs[m.Index], offs[m.Index+m.Length]
		if prev != start {
			spans = append(spans, span{prev, start, false})
		}
		spans = append(spans, span{start, end, true})
		prev = end
		m, err = re.FindNextMatch(m)
	}
	if prev != len(s) {
		spans = append(spans, span{prev, len(s), false})
	}
	return spans
}

// findLiteral is find_matches for a String pattern (an escaped regex in
// tokenizers): non-overlapping occurrences, leftmost first. An empty
// pattern matches only empty strings, which split nothing.
func findLiteral(lit, s string) []span {
	if lit == "" {
		return []span{{0, len(s), false}}
	}
	var spans []span
	prev := 0
	for {
		j := strings.Index(s[prev:], lit)
		if j < 0 {
			break
		}
		start := prev + j
		if start != prev {
			spans = append(spans, span{prev, start, false})
		}
		spans = append(spans, span{start, start + len(lit), true})
		prev = start + len(lit)
	}
	if prev != len(s) {
		spans = append(spans, span{prev, len(s), false})
	}
	return spans
}

// findDigits is find_matches for the predicate char::is_numeric: each
// numeric character a match, the runs between them not.
func findDigits(s string) []span {
	var spans []span
	last := 0
	for i, r := range s {
		if unicode.IsNumber(r) {
			if last < i {
				spans = append(spans, span{last, i, false})
			}
			n := utf8.RuneLen(r)
			spans = append(spans, span{i, i + n, true})
			last = i + n
		}
	}
	if last < len(s) {
		spans = append(spans, span{last, len(s), false})
	}
	return spans
}

// applyBehavior is NormalizedString::split's treatment of the matches:
// it returns the pieces, match set on those to drop.
func applyBehavior(spans []span, b splitBehavior) []span {
	out := make([]span, 0, len(spans))
	switch b {
	case behaviorIsolated:
		for _, s := range spans {
			out = append(out, span{s.start, s.end, false})
		}
	case behaviorRemoved:
		out = append(out, spans...)
	case behaviorContiguous:
		prev := false
		for _, s := range spans {
			if s.match == prev && len(out) > 0 {
				out[len(out)-1].end = s.end
			} else {
				out = append(out, span{s.start, s.end, false})
			}
			prev = s.match
		}
	case behaviorMergedWithPrevious:
		prev := false
		for _, s := range spans {
			if s.match && !prev && len(out) > 0 {
				out[len(out)-1].end = s.end
			} else {
				out = append(out, span{s.start, s.end, false})
			}
			prev = s.match
		}
	case behaviorMergedWithNext:
		prev := false
		for k := len(spans) - 1; k >= 0; k-- {
			s := spans[k]
			if s.match && !prev && len(out) > 0 {
				out[len(out)-1].start = s.start
			} else {
				out = append(out, span{s.start, s.end, false})
			}
			prev = s.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	kept := out[:0]
	for _, s := range out {
		if !s.match {
			kept = append(kept, s)
		}
	}
	return kept
}
