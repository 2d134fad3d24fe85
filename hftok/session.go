package hftok

import (
	"container/list"
	"sync"
)

// DefaultSessionBytes bounds the prompts a Chat remembers for incremental
// session tokenization (ChatConfig.SessionBytes).
const DefaultSessionBytes = 256 << 20

// TokenizeChatSession is TokenizeChat for one turn of an agent session: the
// session's previous prompt (the last one tokenized under this session
// key) gives the ids of the prompt's unchanged rendered prefix, and only
// the rest is encoded (Tokenizer.EncodeFrom), so a turn that appends 500
// tokens to a long context costs the rendering and the 500 tokens, not
// the context's encoding. The result equals TokenizeChat's. The returned
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
	prev, memo := s.get(session)
	text, memo, err := c.render(body, memo, true)
	if err != nil {
		return nil, err
	}
	e, _ := c.tok.EncodeFrom(prev, text)
	s.put(session, e, memo)
	return e.IDs(), nil
}

func (c *Chat) sessions() *sessionCache {
	c.sessOnce.Do(func() {
		budget := c.sessionBytes
		if budget == 0 {
			budget = DefaultSessionBytes
		}
		if budget > 0 {
			c.sess = &sessionCache{budget: budget, m: map[string]*list.Element{}}
		}
	})
	return c.sess
}

// sessionCache is a bytes-bounded LRU of each session's last Encoding and
// what parsing its body left (parseMemo).
type sessionCache struct {
	budget int
	mu     sync.Mutex // guards the fields below
	m      map[string]*list.Element
	lru    list.List // of *sessionEntry, most recent first
	bytes  int
}

type sessionEntry struct {
	key  string
	e    *Encoding
	memo *parseMemo
	size int
}

func (s *sessionCache) get(key string) (*Encoding, *parseMemo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.m[key]; ok {
		s.lru.MoveToFront(el)
		se := el.Value.(*sessionEntry)
		return se.e, se.memo
	}
	return nil, nil
}

func (s *sessionCache) put(key string, e *Encoding, memo *parseMemo) {
	size := e.Size() + memo.size() + len(key)
	if size > s.budget {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.m[key]; ok {
		old := el.Value.(*sessionEntry)
		s.bytes += size - old.size
		old.e, old.memo, old.size = e, memo, size
		s.lru.MoveToFront(el)
	} else {
		s.m[key] = s.lru.PushFront(&sessionEntry{key: key, e: e, memo: memo, size: size})
		s.bytes += size
	}
	for s.bytes > s.budget {
		el := s.lru.Back()
		old := el.Value.(*sessionEntry)
		s.lru.Remove(el)
		delete(s.m, old.key)
		s.bytes -= old.size
	}
}
