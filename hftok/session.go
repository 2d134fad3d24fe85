package hftok

import "github.com/agentkv/agentkv/internal/bytelru"

// DefaultSessionBytes bounds the prompts a Chat remembers for incremental
// session tokenization (ChatConfig.SessionBytes).
const DefaultSessionBytes = 256 << 20

// TokenizeChatSession is TokenizeChat for one turn of an agent session: the
// session's previous prompt (the last one tokenized under this session
// key) gives the ids of the prompt's unchanged rendered prefix, and only
// the rest is encoded (Tokenizer.EncodeFrom), so a turn that appends 500
// tokens to a long context costs the rendering and the 500 tokens, not
// the context's encoding. The result equals TokenizeChat's. The session's
// memory keeps body (not a copy): the caller must not modify it after the
// call (a 128 K-token body is 500 KB a turn not copied). The returned
// slice is shared with the session's memory: the caller must not modify
// it (appending is safe: its capacity is its length). Safe for concurrent
// use; two turns of one session at once each still get exact ids.
func (c *Chat) TokenizeChatSession(session string, body []byte) ([]uint32, error) {
	s := c.sessions()
	if s == nil || session == "" {
		text, err := c.Render(body)
		if err != nil {
			return nil, err
		}
		return c.tok.Encode(nil, text), nil
	}
	prev, _ := s.Get(session)
	text, memo, err := c.render(body, prev.memo, true)
	if err != nil {
		return nil, err
	}
	e, _ := c.tok.EncodeFrom(prev.e, text)
	s.Put(session, sessionMemory{e, memo}, e.Size()+memo.size()+len(session))
	return e.IDs(), nil
}

// sessionMemory is what a session's last turn left: its Encoding and what
// parsing its body left (parseMemo).
type sessionMemory struct {
	e    *Encoding
	memo *parseMemo
}

// sessions is the bytes-bounded LRU of each session's memory, or nil when
// SessionBytes < 0.
func (c *Chat) sessions() *bytelru.Cache[string, sessionMemory] {
	c.sessOnce.Do(func() {
		budget := c.sessionBytes
		if budget == 0 {
			budget = DefaultSessionBytes
		}
		if budget > 0 {
			c.sess = bytelru.New[string, sessionMemory](budget)
		}
	})
	return c.sess
}
