package wordtok

// Words is the vocabulary the mock worker generates from: 64 short words
// of programming prose. Their ids always decode.
var Words = [64]string{
	"the", "code", "reads", "file", "and", "then", "returns", "a", "value", "from",
	"function", "test", "passes", "with", "each", "call", "to", "build", "list", "of",
	"items", "in", "order", "so", "that", "module", "loads", "config", "before", "it",
	"runs", "tool", "checks", "path", "output", "error", "is", "handled", "by", "loop",
	"over", "lines", "which", "writes", "result", "into", "buffer", "after", "parsing", "input",
	"string", "field", "map", "key", "index", "block", "cache", "hit", "request", "reply",
	"stream", "token", "done", "now",
}

var generated = func() map[uint32]string {
	m := make(map[uint32]string, len(Words))
	for _, w := range Words {
		m[WordID(w)] = w
	}
	return m
}()

func isGenerated(id uint32) bool {
	_, ok := generated[id]
	return ok
}

// Generate appends n generated token ids to dst, a deterministic function
// of seed and the position: token i is Words[mix(seed + i) mod 64].
func Generate(dst []uint32, seed uint64, n int) []uint32 {
	for i := 0; i < n; i++ {
		dst = append(dst, WordID(Words[GeneratedWord(seed, i)]))
	}
	return dst
}

// GeneratedWord returns the index in Words of generated token i for seed.
func GeneratedWord(seed uint64, i int) int {
	z := seed + uint64(i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return int((z ^ (z >> 31)) & 63)
}
