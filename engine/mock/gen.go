package mock

import (
	"context"
	"fmt"
	"net/http"

	"github.com/agentkv/agentkv/internal/wordtok"
)

// generation is one request's reply being generated: the job in the
// engine and what its tokens say.
type generation struct {
	s          *Server
	job        *job
	seed       uint64
	n          int  // output tokens
	limited    bool // n is the request's max_tokens: the reply stops at the limit
	continuing bool // the reply continues the prompt's last message
	tool       *wordtok.Tool
	toolArgs   string
	toolID     string
}

// errStatus is an error with the HTTP status it answers.
type errStatus struct {
	status int
	msg    string
}

func (e *errStatus) Error() string { return e.msg }

func badRequest(format string, a ...any) error {
	return &errStatus{http.StatusBadRequest, fmt.Sprintf(format, a...)}
}

// promptSeed hashes the prompt: the reply is a function of it.
func promptSeed(prompt []uint32) uint64 {
	h := uint64(0xcbf29ce484222325)
	for _, t := range prompt {
		h = (h ^ uint64(t)) * 0x100000001b3
	}
	return h
}

// MaxCacheSaltLen bounds a request's cache_salt, in bytes.
const MaxCacheSaltLen = 256

// generate plans the reply to prompt and submits it to the engine: its
// length is drawn from [MinOutput, MaxOutput] by a hash of the prompt, and
// cut to maxTokens (0: no limit) when that is shorter; tool, when set,
// makes the reply one call to it. salt is the request's cache_salt ("":
// none): blocks cached under one salt are never a hit for another.
func (s *Server) generate(prompt []uint32, maxTokens int, tool *wordtok.Tool, continuing bool, salt string) (*generation, error) {
	if len(prompt) == 0 {
		return nil, badRequest("the prompt is empty")
	}
	if len(salt) > MaxCacheSaltLen {
		return nil, badRequest("cache_salt is %d bytes, more than %d", len(salt), MaxCacheSaltLen)
	}
	if maxTokens < 0 {
		return nil, badRequest("max_tokens must be at least 1, got %d", maxTokens)
	}
	room := s.cfg.MaxModelLen - len(prompt)
	if room < 1 {
		return nil, badRequest("This model's maximum context length is %d tokens. However, your request has %d input tokens.", s.cfg.MaxModelLen, len(prompt))
	}
	g := &generation{s: s, seed: promptSeed(prompt), continuing: continuing}
	tokens := append(make([]uint32, 0, len(prompt)+256), prompt...)
	if tool != nil {
		g.tool, g.toolArgs, g.toolID = tool, toolArguments(*tool), s.nextID("call_")
		tokens = s.tok.Encode(tokens, "<|tool_call|> "+tool.Name+" "+g.toolArgs)
		g.n = len(tokens) - len(prompt)
	} else {
		span := uint64(s.cfg.MaxOutput - s.cfg.MinOutput + 1)
		g.n = s.cfg.MinOutput + int(g.seed%span)
		if maxTokens > 0 && maxTokens < g.n {
			g.n, g.limited = maxTokens, true
		}
		if g.n > room {
			g.n, g.limited = room, true
		}
		tokens = wordtok.Generate(tokens, g.seed, g.n)
	}
	j, err := s.drv.submit(tokens, len(prompt), salt)
	if err != nil {
		return nil, &errStatus{http.StatusBadRequest, err.Error()}
	}
	g.job = j
	return g, nil
}

// piece returns the text of generated token i (words after the first get
// a leading space, the first too when continuing a message).
func (g *generation) piece(i int) string {
	w := wordtok.Words[wordtok.GeneratedWord(g.seed, i)]
	if i > 0 || g.continuing {
		return " " + w
	}
	return w
}

// text returns the text of generated tokens [0, n).
func (g *generation) text(n int) string {
	b := make([]byte, 0, n*7)
	for i := 0; i < n; i++ {
		b = append(b, g.piece(i)...)
	}
	return string(b)
}

// wait streams the reply: emit(from, to) is called (from the handler's
// goroutine) whenever tokens [from, to) have been generated, and the
// mid-stream fault switches apply after each call. It returns the cached
// prompt tokens, or the error that ended the request (the engine
// restarted, ctx ended). For a tool call emit is called once, with every
// token.
func (g *generation) wait(ctx context.Context, rf *requestFaults, emit func(from, to int) error) (cached int, err error) {
	sent := 0
	for {
		gen, done, c, jerr := g.s.drv.progress(g.job)
		if jerr != nil {
			return c, jerr
		}
		if g.tool != nil && !done {
			gen = 0
		}
		if rf != nil && rf.cutAfter > 0 && gen > rf.cutAfter {
			gen = rf.cutAfter // cut after exactly cutAfter tokens
		}
		if rf != nil {
			gen = rf.capAt(sent, gen)
		}
		if gen > sent {
			if err := emit(sent, gen); err != nil {
				return c, err
			}
			sent = gen
			if rf != nil && !rf.during(ctx, sent) {
				return c, ctx.Err()
			}
		}
		if done {
			return c, nil
		}
		select {
		case <-g.job.notify:
		case <-ctx.Done():
			return c, ctx.Err()
		}
	}
}
