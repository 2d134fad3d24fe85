package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/agentkv/agentkv/flashindex"
)

func init() {
	register(&command{
		name:    "hash",
		summary: "print the Dynamo-compatible block hashes of a token sequence",
		usage:   "--block-size N [--lora NAME] [--seq] [TOKENS...]",
		help: `
Hash token ids into KV block hashes exactly as NVIDIA Dynamo's router and the
agentkv index do: local hash = XXH3-64 (seed 1337, plus the adapter name's
hash for a LoRA) over each full block's token ids as little-endian u32;
sequence hash chains each block onto its parent. A partial tail block is not
hashed. Use it to see why a router and an engine disagree about overlap.

Tokens come as arguments ("1 2 3" or "1,2,3"), or, with no arguments, as a
JSON array on standard input. Output is a JSON object with one entry per full
block; --seq prints only the sequence hashes, one per line.`,
		run: runHash,
	})
}

type hashBlock struct {
	Index    int    `json:"index"`
	Local    uint64 `json:"local_hash"`
	Sequence uint64 `json:"sequence_hash"`
}

type hashOutput struct {
	BlockSize int         `json:"block_size"`
	LoRA      string      `json:"lora,omitempty"`
	Tokens    int         `json:"tokens"`
	TailLen   int         `json:"unhashed_tail_tokens"`
	Blocks    []hashBlock `json:"blocks"`
}

func runHash(env *cmdEnv, args []string) error {
	c := commands["hash"]
	fs := newFlags(env, c)
	blockSize := fs.Int("block-size", 0, "tokens per KV block (required; must match the engine)")
	lora := fs.String("lora", "", "LoRA adapter name (changes the local-hash seed)")
	seqOnly := fs.Bool("seq", false, "print only the sequence hashes, one per line")
	if err := parseFlags(env, c, fs, args); err != nil {
		return err
	}
	if *blockSize < 1 || *blockSize > flashindex.MaxBlockSize {
		return usagef("hash: --block-size must be between 1 and %d, got %d", flashindex.MaxBlockSize, *blockSize)
	}
	var tokens []uint32
	var err error
	if fs.NArg() > 0 {
		tokens, err = parseTokenArgs(fs.Args())
	} else {
		tokens, err = readTokenJSON(env.stdin)
	}
	if err != nil {
		return usagef("hash: %v", err)
	}
	h, err := flashindex.NewHasher(*blockSize, *lora)
	if err != nil {
		return usagef("hash: %v", err)
	}
	local, seq := h.AppendHashes(nil, nil, tokens, 0, false)
	if *seqOnly {
		for _, s := range seq {
			fmt.Fprintln(env.stdout, s)
		}
		return nil
	}
	out := hashOutput{BlockSize: *blockSize, LoRA: *lora, Tokens: len(tokens),
		TailLen: len(tokens) % *blockSize, Blocks: make([]hashBlock, len(local))}
	for i := range local {
		out.Blocks[i] = hashBlock{Index: i, Local: local[i], Sequence: seq[i]}
	}
	enc := json.NewEncoder(env.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// parseTokenArgs accepts tokens as separate arguments, comma lists, or both.
func parseTokenArgs(args []string) ([]uint32, error) {
	var out []uint32
	for _, a := range args {
		for _, f := range strings.Split(a, ",") {
			f = strings.TrimSpace(f)
			if f == "" {
				continue
			}
			v, err := strconv.ParseUint(f, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("bad token %q: want an integer in [0, 4294967295]", f)
			}
			out = append(out, uint32(v))
		}
	}
	return out, nil
}

// maxStdinTokens bounds a JSON token array read from stdin (64 MiB of input).
const maxStdinBytes = 64 << 20

func readTokenJSON(r io.Reader) ([]uint32, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxStdinBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading stdin: %v", err)
	}
	if len(b) > maxStdinBytes {
		return nil, fmt.Errorf("stdin holds more than %d bytes", maxStdinBytes)
	}
	var raw []json.Number
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("stdin: want a JSON array of token ids: %v", err)
	}
	out := make([]uint32, len(raw))
	for i, n := range raw {
		v, err := strconv.ParseUint(n.String(), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("bad token %q at index %d: want an integer in [0, 4294967295]", n.String(), i)
		}
		out[i] = uint32(v)
	}
	return out, nil
}
