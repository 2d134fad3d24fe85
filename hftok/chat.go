package hftok

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/agentkv/agentkv/internal/jinja"

	"github.com/agentkv/agentkv/internal/bytelru"
)

// ErrUnsupported is returned for a request this package cannot render
// exactly as the engine would (images, audio and other media parts, whose
// placeholders depend on the model's processor). Callers fall back to the
// engine's /tokenize.
var ErrUnsupported = errors.New("hftok: request not supported in process")

// ChatConfig adjusts a Chat to the engine it reproduces. The zero value
// reproduces vLLM serving the model's own template with default settings.
type ChatConfig struct {
	// Template replaces the model's chat template (vLLM's --chat-template,
	// given as the template's text).
	Template string
	// DefaultKwargs are the server's default template variables (vLLM's
	// --default-chat-template-kwargs); a request's chat_template_kwargs
	// override them.
	DefaultKwargs map[string]any
	// ContentFormat is how message content reaches the template, as vLLM's
	// --chat-template-content-format: "string" (text parts joined with
	// newlines), "openai" (a list of {"type": "text", "text": ...} parts) or
	// "" / "auto": "openai" when the template loops over a message's
	// content, else "string".
	ContentFormat string
	// ToolStrict renders each tool's function with a "strict" field
	// (null unless the request sets it), as vLLM versions whose
	// FunctionDefinition declares it do. Without it the function carries
	// name, description and parameters, then any other fields the request
	// sent.
	ToolStrict bool
	// SessionBytes bounds the prompts remembered for TokenizeChatSession
	// (least recently used sessions are forgotten first); 0 means
	// DefaultSessionBytes, negative remembers none.
	SessionBytes int
}

// Chat tokenizes OpenAI chat completions requests exactly as vLLM does for
// a Hugging Face model: the messages converted as vLLM's chat_utils
// converts them, the model's chat template rendered with Hugging Face's
// Jinja settings, and the text encoded without added special tokens. It is
// safe for concurrent use.
type Chat struct {
	tok     *Tokenizer
	tmpl    *jinja.Template
	openai  bool                   // content reaches the template as parts
	strict  bool                   // ChatConfig.ToolStrict
	globals map[string]jinja.Value // special tokens and default kwargs; read-only after NewChat

	// reuseConv: a session turn may reuse the previous turn's converted
	// messages (the template calls no method that changes a value in
	// place, which would leak one render's change into the next).
	reuseConv bool

	sessionBytes int // ChatConfig.SessionBytes
	sessOnce     sync.Once
	sess         *bytelru.Cache[string, sessionMemory] // nil when SessionBytes < 0
}

// LoadChat loads a model directory as Hugging Face saves it:
// tokenizer.json, tokenizer_config.json, and chat_template.jinja when
// present (it takes precedence over the config's chat_template, as in
// transformers).
func LoadChat(dir string, cfg ChatConfig) (*Chat, error) {
	tok, err := Load(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, err
	}
	conf, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		return nil, fmt.Errorf("hftok: %w", err)
	}
	if cfg.Template == "" {
		if b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
			cfg.Template = string(b)
		}
	}
	return NewChat(tok, conf, cfg)
}

// tokenizerConfig is the part of tokenizer_config.json a Chat reads.
type tokenizerConfig struct {
	ChatTemplate json.RawMessage `json:"chat_template"`
	BOS          json.RawMessage `json:"bos_token"`
	EOS          json.RawMessage `json:"eos_token"`
	UNK          json.RawMessage `json:"unk_token"`
	PAD          json.RawMessage `json:"pad_token"`
	SEP          json.RawMessage `json:"sep_token"`
	CLS          json.RawMessage `json:"cls_token"`
	Mask         json.RawMessage `json:"mask_token"`
}

// NewChat builds a Chat from a tokenizer and the bytes of the model's
// tokenizer_config.json (its chat_template and special tokens).
func NewChat(tok *Tokenizer, tokenizerConfigJSON []byte, cfg ChatConfig) (*Chat, error) {
	var tc tokenizerConfig
	if err := json.Unmarshal(tokenizerConfigJSON, &tc); err != nil {
		return nil, fmt.Errorf("hftok: tokenizer_config.json: %w", err)
	}
	src := cfg.Template
	if src == "" {
		var err error
		if src, err = configTemplate(tc.ChatTemplate); err != nil {
			return nil, err
		}
	}
	tmpl, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("hftok: chat template: %w", err)
	}
	c := &Chat{tok: tok, tmpl: tmpl, strict: cfg.ToolStrict, globals: map[string]jinja.Value{}, sessionBytes: cfg.SessionBytes,
		reuseConv: !tmpl.MutatesValues()}
	switch cfg.ContentFormat {
	case "", "auto":
		c.openai = loopsOverContent.MatchString(src)
	case "string":
	case "openai":
		c.openai = true
	default:
		return nil, fmt.Errorf("hftok: unknown content format %q (want auto, string or openai)", cfg.ContentFormat)
	}
	for name, raw := range map[string]json.RawMessage{"bos_token": tc.BOS, "eos_token": tc.EOS, "unk_token": tc.UNK,
		"pad_token": tc.PAD, "sep_token": tc.SEP, "cls_token": tc.CLS, "mask_token": tc.Mask} {
		if s, ok := tokenText(raw); ok {
			c.globals[name] = jinja.NewString(s)
		}
	}
	if len(cfg.DefaultKwargs) > 0 {
		b, err := json.Marshal(cfg.DefaultKwargs)
		if err != nil {
			return nil, fmt.Errorf("hftok: default kwargs: %w", err)
		}
		v, err := parseJSON(b)
		if err != nil {
			return nil, err
		}
		d := v.AsDict()
		for _, k := range d.Keys {
			c.globals[k] = d.Data[k]
		}
	}
	return c, nil
}

// loopsOverContent finds a for loop over a message's content, which is
// how vLLM's auto detection tells a template that wants content parts.
var loopsOverContent = regexp.MustCompile(`\{%-?\s*for\s+\w+\s+in\s+\w+(\.content|\[\s*['"]content['"]\s*\])`)

// configTemplate reads tokenizer_config.json's chat_template: a string,
// or a list of named templates of which "default" is taken.
func configTemplate(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil && s != "" {
		return s, nil
	}
	var named []struct{ Name, Template string }
	if err := json.Unmarshal(raw, &named); err == nil {
		for _, t := range named {
			if t.Name == "default" {
				return t.Template, nil
			}
		}
	}
	return "", errors.New("hftok: the model has no chat template (tokenizer_config.json chat_template or chat_template.jinja)")
}

// tokenText reads a special token: a string or an AddedToken object.
func tokenText(raw json.RawMessage) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil && s != "" {
		return s, true
	}
	var t struct{ Content string }
	if json.Unmarshal(raw, &t) == nil && t.Content != "" {
		return t.Content, true
	}
	return "", false
}

// Tokenizer returns the tokenizer the Chat encodes with.
func (c *Chat) Tokenizer() *Tokenizer { return c.tok }

// TokenizeChat returns the prompt token ids vLLM computes for a chat
// completions request body (what its /tokenize answers for the same
// body). It satisfies gateway.Tokenizer. Errors: invalid JSON or a
// request vLLM would refuse, a template error, or ErrUnsupported.
func (c *Chat) TokenizeChat(body []byte) ([]uint32, error) {
	text, err := c.Render(body)
	if err != nil {
		return nil, err
	}
	return c.tok.Encode(nil, text), nil
}

// Render returns the prompt text of a chat completions request body: the
// chat template's output before tokenization.
func (c *Chat) Render(body []byte) (string, error) {
	text, _, err := c.render(body, nil, false)
	return text, err
}

// render is Render, reusing what parsing prev left (nil: nothing) and,
// with record, returning what parsing body leaves for the next body.
func (c *Chat) render(body []byte, prev *parseMemo, record bool) (string, *parseMemo, error) {
	req, memo, err := memoParse(body, prev, record)
	if err != nil {
		return "", nil, err
	}
	var prevConv []convMemo
	var prevLoop *jinja.LoopMemo
	if prev != nil && c.reuseConv {
		prevConv, prevLoop = prev.conv, prev.loop
	}
	text, conv, loop, err := c.renderRequest(req, len(body), prevConv, prevLoop, memo != nil && c.reuseConv)
	if err != nil {
		return "", nil, err
	}
	if memo != nil && c.reuseConv {
		memo.conv, memo.loop = conv, loop
	}
	return text, memo, nil
}

// renderRequest renders a decoded request; size is the request body's
// length, about the rendered prompt's (room made for it up front). prev
// is the previous turn's converted messages (conversation), the second
// result this one's; with memo, prevLoop is the previous turn's loop memo
// (jinja.Template.RenderMemo: its unchanged messages' iterations are
// replayed, not run) and the third result this one's.
func (c *Chat) renderRequest(req jinja.Value, size int, prev []convMemo, prevLoop *jinja.LoopMemo, memo bool) (string, []convMemo, *jinja.LoopMemo, error) {
	if !req.IsDict() {
		return "", nil, nil, errors.New("hftok: the request is not a JSON object")
	}
	r := req.AsDict()
	vars := make(map[string]jinja.Value, len(c.globals)+8)
	for k, v := range c.globals {
		vars[k] = v
	}
	if kw, ok := r.Get("chat_template_kwargs"); ok && kw.IsDict() {
		d := kw.AsDict()
		for _, k := range d.Keys {
			vars[k] = d.Data[k]
		}
	}
	msgsV, ok := r.Get("messages")
	if !ok || !msgsV.IsList() || msgsV.AsList().Len() == 0 {
		return "", nil, nil, errors.New("hftok: the request has no messages")
	}
	msgs, conv, err := c.conversation(msgsV.AsList().Items, prev)
	if err != nil {
		return "", nil, nil, err
	}
	vars["messages"] = jinja.NewList(msgs)
	vars["tools"] = c.tools(r)
	vars["documents"] = field(r, "documents", jinja.None())
	gen := field(r, "add_generation_prompt", jinja.NewBool(true))
	cont := field(r, "continue_final_message", jinja.NewBool(false))
	if gen.IsTruthy() && cont.IsTruthy() {
		return "", nil, nil, errors.New("hftok: add_generation_prompt and continue_final_message cannot both be true")
	}
	vars["add_generation_prompt"] = gen
	vars["continue_final_message"] = cont
	var text string
	var loop *jinja.LoopMemo
	if memo {
		text, loop, err = c.tmpl.RenderMemo(vars, size, prevLoop)
	} else {
		text, err = c.tmpl.RenderValuesSize(vars, size)
	}
	if err != nil {
		return "", nil, nil, fmt.Errorf("hftok: chat template: %w", err)
	}
	if cont.IsTruthy() {
		text, err = continueFinal(text, msgs[len(msgs)-1])
	}
	return text, conv, loop, err
}

// field returns d[key], or def when it is absent or null.
func field(d *jinja.Dict, key string, def jinja.Value) jinja.Value {
	if v, ok := d.Get(key); ok && !v.IsNone() {
		return v
	}
	return def
}

// continueFinal cuts the rendered text right after the final message's
// content, as transformers does for continue_final_message.
func continueFinal(text string, last jinja.Value) (string, error) {
	var final string
	if content, ok := last.AsDict().Get("content"); ok {
		switch {
		case content.IsString():
			final = content.AsString()
		case content.IsList():
			items := content.AsList().Items
			for i := len(items) - 1; i >= 0; i-- {
				if items[i].IsDict() {
					if t, ok := items[i].AsDict().Get("text"); ok && t.IsString() {
						final = t.AsString()
						break
					}
				}
			}
		}
	}
	final = strings.TrimSpace(final)
	i := strings.LastIndex(text, final)
	if i < 0 {
		return "", errors.New("hftok: continue_final_message: the final message's content is not in the rendered prompt")
	}
	return text[:i+len(final)], nil
}
