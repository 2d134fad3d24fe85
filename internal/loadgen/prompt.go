package loadgen

// Prompt synthesis: hash ids to text.
//
// Every position of a prompt becomes one word from vocab, each with its
// leading space. Block b of a turn's prompt (positions b·B to b·B+B-1, B =
// Workload.BlockTokens) is derived from HashIDs[b] alone, so equal ids at
// equal positions give byte-identical text, and because every word is one
// pre-tokenizer piece, identical token ids. Distinct ids give unrelated text.

// Prompter turns a turn's block hash ids into prompt text, deterministically.
// It is an immutable value, safe for concurrent use.
type Prompter struct {
	seed  uint64
	block int
}

// NewPrompter returns a Prompter for blocks of blockTokens words (values
// below 1 mean 1) whose vocabulary choice is salted by seed.
func NewPrompter(blockTokens int, seed uint64) Prompter {
	return Prompter{seed: mix64(seed ^ 0x6c6f616467656e21), block: max(blockTokens, 1)}
}

// BlockTokens is the number of words one hash id expands to.
func (p Prompter) BlockTokens() int { return p.block }

// Append appends the prompt for a turn of inputTokens tokens (at least one
// word) whose blocks have the given hash ids, and returns the extended
// buffer. Word i belongs to block i/BlockTokens and is derived from that
// block's id and i%BlockTokens; words past the ids (a source without block
// ids, or fewer ids than the prompt needs) are derived from salt and i, so
// they are unique to the turn when the caller gives each turn its own salt.
// hashIDs is only read.
func (p Prompter) Append(dst []byte, hashIDs []uint64, inputTokens int, salt uint64) []byte {
	n := max(inputTokens, 1)
	for b := 0; b*p.block < n; b++ {
		lo, hi := b*p.block, min((b+1)*p.block, n)
		var state uint64
		if b < len(hashIDs) {
			state = mix64(p.seed ^ mix64(hashIDs[b]))
		} else {
			// A block without an id: from the turn's salt and the block's
			// position, never equal to an id-derived block (the extra mix).
			state = mix64(mix64(p.seed^0x9e3779b97f4a7c15^mix64(salt)) + uint64(b))
		}
		for j := lo; j < hi; j++ {
			state += 0x9e3779b97f4a7c15
			dst = append(dst, vocab[mix64(state)>>56]...)
		}
	}
	return dst
}

// Words returns the number of words Append writes for inputTokens.
func Words(inputTokens int) int { return max(inputTokens, 1) }

// mix64 is SplitMix64's finaliser: a bijective 64-bit mix.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// vocab holds 256 common English words with a leading space. Each is one
// token, in context, for the cl100k_base and o200k_base (OpenAI) and Llama 3
// tokenizers (measured: 6,400 random words are 6,400 tokens in all three),
// so a prompt of N words is N tokens there; other tokenizers may differ.
var vocab = [256]string{
	" the", " of", " and", " to", " in", " is", " that", " for", " it", " as", " was",
	" with", " be", " by", " on", " not", " he", " this", " are", " or", " his", " from",
	" at", " which", " but", " have", " an", " they", " you", " were", " her", " she",
	" there", " one", " all", " we", " their", " been", " has", " when", " who", " will",
	" more", " no", " if", " out", " so", " said", " what", " up", " its", " about",
	" into", " than", " them", " can", " only", " other", " new", " some", " could",
	" time", " these", " two", " may", " then", " do", " first", " any", " my", " now",
	" such", " like", " our", " over", " man", " me", " even", " most", " made", " after",
	" also", " did", " many", " before", " must", " through", " back", " years", " where",
	" much", " your", " way", " well", " down", " should", " because", " each", " just",
	" those", " people", " how", " too", " little", " state", " good", " very", " make",
	" world", " still", " own", " see", " men", " work", " long", " get", " here",
	" between", " both", " life", " being", " under", " never", " day", " same", " another",
	" know", " while", " last", " might", " us", " great", " old", " year", " off", " come",
	" since", " against", " go", " came", " right", " used", " take", " three", " place",
	" home", " small", " found", " thought", " went", " say", " part", " once", " general",
	" high", " upon", " school", " every", " does", " got", " united", " left", " number",
	" course", " war", " until", " always", " away", " something", " fact", " though",
	" water", " less", " public", " put", " think", " almost", " hand", " enough", " far",
	" took", " head", " yet", " government", " system", " better", " set", " told",
	" nothing", " night", " end", " why", " called", " eyes", " find", " going", " look",
	" asked", " later", " knew", " point", " next", " city", " business", " give", " group",
	" toward", " young", " days", " let", " room", " president", " side", " social",
	" given", " present", " several", " order", " national", " possible", " rather",
	" second", " face", " per", " among", " form", " important", " often", " things",
	" looked", " early", " white", " case", " become", " large", " big", " need", " four",
	" within", " felt", " along", " children", " saw", " best", " church", " ever",
	" least", " power", " development", " light", " thing", " seemed", " family",
	" interest", " want", " members",
}
