package hftok

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedPattern is one added token as a matcher looks for it: text is its
// content, normalized when the token is.
type addedPattern struct {
	text                       string
	id                         uint32
	lstrip, rstrip, singleWord bool
}

// addedMatcher finds added tokens as tokenizers' AddedVocabulary does: an
// Aho-Corasick automaton in leftmost-longest mode over the token
// contents, the matches then adjusted for single_word, lstrip and rstrip
// (AddedVocabulary::find_matches). It is a byte trie walked from each
// position whose byte can start a token. Immutable after construction.
type addedMatcher struct {
	pats  []addedPattern
	first [256]bool // bytes some token starts with
	one   int       // the only first byte when there is one, else -1
	nodes []trieNode
	// maxLen is the longest token's length: how far a match decision
	// reads. cut says, by id, whether a token can be a cut point of
	// incremental encoding (no lstrip, no single_word, not starting with
	// white space, for every pattern of the id).
	maxLen int
	cut    map[uint32]bool
}

// trieNode is a node of the byte trie: its children sorted by byte.
type trieNode struct {
	bytes    []byte
	children []int32
	pat      int32 // index in pats of the token ending here, or -1
}

func (n *trieNode) child(b byte) int32 {
	for i, c := range n.bytes {
		if c == b {
			return n.children[i]
		}
	}
	return -1
}

func newAddedMatcher(pats []addedPattern) *addedMatcher {
	m := &addedMatcher{pats: pats, nodes: []trieNode{{pat: -1}}, one: -1, cut: map[uint32]bool{}}
	firsts := 0
	for i, p := range pats {
		m.maxLen = max(m.maxLen, len(p.text))
		ok, seen := m.cut[p.id]
		m.cut[p.id] = (ok || !seen) && !p.lstrip && !p.singleWord && !isSpaceByte(p.text[0])
		if !m.first[p.text[0]] {
			firsts++
			m.one = int(p.text[0])
		}
		m.first[p.text[0]] = true
		node := int32(0)
		for j := 0; j < len(p.text); j++ {
			child := m.nodes[node].child(p.text[j])
			if child < 0 {
				child = int32(len(m.nodes))
				m.nodes = append(m.nodes, trieNode{pat: -1})
				n := &m.nodes[node]
				n.bytes = append(n.bytes, p.text[j])
				n.children = append(n.children, child)
			}
			node = child
		}
		if m.nodes[node].pat < 0 { // equal patterns: the first one added wins
			m.nodes[node].pat = int32(i)
		}
	}
	if firsts != 1 {
		m.one = -1
	}
	return m
}

// find returns the leftmost-longest match at or after pos: its bounds and
// its index in pats, or pat -1.
func (m *addedMatcher) find(s string, pos int) (start, end, pat int) {
	for i := pos; i < len(s); i++ {
		if m.one >= 0 {
			j := strings.IndexByte(s[i:], byte(m.one))
			if j < 0 {
				return 0, 0, -1
			}
			i += j
		} else if !m.first[s[i]] {
			continue
		}
		node, best, bestEnd := int32(0), int32(-1), 0
		for j := i; j < len(s); j++ {
			node = m.nodes[node].child(s[j])
			if node < 0 {
				break
			}
			if p := m.nodes[node].pat; p >= 0 {
				best, bestEnd = p, j+1
			}
		}
		if best >= 0 {
			return i, bestEnd, int(best)
		}
	}
	return 0, 0, -1
}

// split cuts s into added tokens and the text between them and calls
// emit for each in order: id >= 0 for a token (piece is the text it
// covers, stripped white space included), id -1 for text. Empty pieces
// are not emitted, as tokenizers drops empty splits.
func (m *addedMatcher) split(s string, emit func(id int64, piece string)) {
	startOffset := 0
	for pos := 0; pos < len(s); {
		start, stop, pi := m.find(s, pos)
		if pi < 0 {
			break
		}
		pos = stop // the automaton goes on after the match, whatever becomes of it
		p := &m.pats[pi]
		if p.singleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if p.lstrip {
			start = max(trailingSpaceStart(s[:start]), startOffset)
		}
		if p.rstrip {
			stop += leadingSpaceLen(s[stop:])
		}
		if startOffset < start {
			emit(-1, s[startOffset:start])
		}
		emit(int64(p.id), s[start:stop])
		startOffset = stop
	}
	if startOffset < len(s) {
		emit(-1, s[startOffset:])
	}
}

// isSpaceByte reports an ASCII white space byte.
func isSpaceByte(b byte) bool {
	switch b {
	case ' ', '\t', '\n', '\r', '\v', '\f':
		return true
	}
	return false
}

// isWordRune is Rust regex's Unicode \w: Alphabetic, Mark,
// Decimal_Number, Connector_Punctuation and Join_Control.
func isWordRune(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '_'
	}
	return unicode.IsLetter(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r) ||
		unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) || unicode.Is(unicode.Join_Control, r)
}

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordRune(r)
}

func startsWithWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordRune(r)
}

// trailingSpaceStart returns where the white space at the end of s
// begins (len(s) if s does not end with white space).
func trailingSpaceStart(s string) int {
	i := len(s)
	for i > 0 {
		r, n := utf8.DecodeLastRuneInString(s[:i])
		if !unicode.IsSpace(r) {
			break
		}
		i -= n
	}
	return i
}

// leadingSpaceLen returns the length of the white space s starts with.
func leadingSpaceLen(s string) int {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if !unicode.IsSpace(r) {
			break
		}
		i += n
	}
	return i
}
