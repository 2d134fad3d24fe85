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
	text, err := c.Render(body)
	if err != nil {
		return nil, err
	}
	s := c.sessions()
	if s == nil || session == "" {
		return c.tok.Encode(nil, text), nil
	}
	e, _ := c.tok.EncodeFrom(s.get(session), text)
	s.put(session, e)
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

// sessionCache is a bytes-bounded LRU of each session's last Encoding.
type sessionCache struct {
	budget int
	mu     sync.Mutex // guards the fields below
	m      map[string]*list.Element
	lru    list.List // of *sessionEntry, most recent first
	bytes  int
}

type sessionEntry struct {
	key string
	e   *Encoding
}

func (s *sessionCache) get(key string) *Encoding {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.m[key]; ok {
		s.lru.MoveToFront(el)
		return el.Value.(*sessionEntry).e
	}
	return nil
}

func (s *sessionCache) put(key string, e *Encoding) {
	size := e.Size() + len(key)
	if size > s.budget {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.m[key]; ok {
		old := el.Value.(*sessionEntry)
		s.bytes += size - old.e.Size() - len(key)
		old.e = e
		s.lru.MoveToFront(el)
	} else {
		s.m[key] = s.lru.PushFront(&sessionEntry{key: key, e: e})
		s.bytes += size
	}
	for s.bytes > s.budget {
		el := s.lru.Back()
		old := el.Value.(*sessionEntry)
		s.lru.Remove(el)
		delete(s.m, old.key)
		s.bytes -= old.e.Size() + len(old.key)
	}
}
