package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"github.com/agentkv/agentkv/gateway/tenant"
	"io"
	"net/http"

	"github.com/agentkv/agentkv"
	"github.com/agentkv/agentkv/gateway/translate"
)

// This file translates a token-API call for a worker that does not serve
// the API the client called (Worker.TokenAPIs): SGLang's /generate to
// vLLM's /inference/v1/generate and back, either to /v1/completions with
// a token-id prompt. Token ids and logprobs are carried exactly, never
// re-tokenized; an aborted call ends with finish reason abort.

// maxTokenReply bounds a whole (non-streamed) translated reply.
const maxTokenReply = 256 << 20

// errTokenCut is a translated stream that ended without a finish reason.
var errTokenCut = errors.New("gateway: the worker's token stream ended without a finish reason")

// translateTokens sends tc to wk in the target token API and answers the
// client in its own.
func (g *Gateway) translateTokens(ctx context.Context, w http.ResponseWriter, wk *worker, target TokenAPI, tc *tokenCall, d *agentkv.Decision, ent *ridEntry, tk *tenant.Ticket) (agentkv.Usage, error) {
	fail := func(status int, msg string, err error) (agentkv.Usage, error) {
		tokenError(w, tc.sglang, status, msg)
		return agentkv.Usage{}, err
	}
	if tc.text {
		return fail(http.StatusBadRequest, "worker "+g.workerName(wk)+" serves no "+tc.api.Path()+": send input_ids (a text prompt cannot be translated without a tokenizer)", translate.ErrBadRequest)
	}
	tr, err := translate.ReadTokenRequest(tc.api, tc.body, tc.tokens)
	if err != nil {
		return fail(http.StatusBadRequest, err.Error(), err)
	}
	tr.RID = tc.rid
	ub, err := translate.EncodeTokenRequest(target, tr)
	if err != nil {
		return fail(http.StatusBadRequest, err.Error(), err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, wk.URL+target.Path(), bytes.NewReader(ub))
	if err != nil {
		return fail(http.StatusInternalServerError, err.Error(), err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.doGated(req, tk)
	switch {
	case err != nil && ent.aborted.Load():
		g.abortedReply(w, tc)
		return agentkv.Usage{FinishReason: "abort"}, nil
	case err != nil:
		return fail(http.StatusBadGateway, g.redact("agentkv gateway: worker "+wk.URL+" failed: "+err.Error()), err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return fail(resp.StatusCode, g.redact(translate.TokenErrorMessage(b)), errStatus(resp.StatusCode))
	}
	tokenHeaders(w.Header(), wk, d)
	enc := &translate.TokenEncoder{API: tc.api, Req: tr}
	dec := &translate.TokenDecoder{API: target}
	if tr.Stream {
		err = g.relayTokenStream(w, resp.Body, dec, enc, ent)
	} else {
		err = relayTokenWhole(w, resp.Body, dec, enc, ent)
	}
	u := enc.Usage()
	return agentkv.Usage{PromptTokens: u.Prompt, CompletionTokens: u.Completion, CachedTokens: u.Cached, FinishReason: enc.FinishReason()}, err
}

// relayTokenWhole translates a whole reply.
func relayTokenWhole(w http.ResponseWriter, body io.Reader, dec *translate.TokenDecoder, enc *translate.TokenEncoder, ent *ridEntry) error {
	b, err := io.ReadAll(io.LimitReader(body, maxTokenReply))
	if err == nil {
		var c translate.TokenChunk
		if c, err = dec.Decode(b); err == nil {
			enc.Add(c)
		}
	}
	if err != nil && !ent.aborted.Load() {
		tokenError(w, enc.API == TokenGenerate, http.StatusBadGateway, "agentkv gateway: translating the worker's reply: "+err.Error())
		return err
	}
	if ent.aborted.Load() {
		enc.Abort()
	}
	w.Header().Set("Content-Type", "application/json")
	_, werr := w.Write(enc.Whole())
	return werr
}

// relayTokenStream translates a stream, object by object: the finish
// reason goes out last, with the usage the worker sent after it.
func (g *Gateway) relayTokenStream(w http.ResponseWriter, body io.Reader, dec *translate.TokenDecoder, enc *translate.TokenEncoder, ent *ridEntry) error {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(b []byte) error {
		if _, err := w.Write(append(append([]byte("data: "), b...), "\n\n"...)); err != nil {
			return err
		}
		return rc.Flush()
	}
	sent := 0
	var rerr error
	br := bufio.NewReaderSize(body, 64<<10)
	for rerr == nil {
		line, err := br.ReadBytes('\n')
		if t := bytes.TrimSpace(bytes.TrimPrefix(bytes.TrimSpace(line), []byte("data:"))); len(t) > 0 && t[0] == '{' {
			c, derr := dec.Decode(t)
			if derr != nil {
				rerr = derr
				break
			}
			enc.Add(c)
			if !enc.Finished() && enc.Len() > sent {
				if werr := send(enc.Chunk(sent)); werr != nil {
					return werr
				}
				sent = enc.Len()
			}
		}
		if err != nil {
			if err != io.EOF {
				rerr = err
			}
			break
		}
	}
	if !enc.Finished() {
		enc.Abort() // aborted, or the worker's stream broke
		if rerr == nil && !ent.aborted.Load() {
			rerr = errTokenCut
		}
	}
	if ent.aborted.Load() {
		rerr = nil
	}
	if err := send(enc.Chunk(sent)); err != nil {
		return err
	}
	if _, err := io.WriteString(w, "data: [DONE]\n\n"); err != nil {
		return err
	}
	_ = rc.Flush()
	return rerr
}

// abortedReply answers a call aborted before any worker answered it: a
// reply with no tokens and finish reason abort, in the client's API.
func (g *Gateway) abortedReply(w http.ResponseWriter, tc *tokenCall) {
	tr, err := translate.ReadTokenRequest(tc.api, tc.body, tc.tokens)
	if err != nil {
		tr = &translate.TokenRequest{Tokens: tc.tokens}
	}
	tr.RID = tc.rid
	enc := &translate.TokenEncoder{API: tc.api, Req: tr}
	enc.Abort()
	if !tc.stream {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(enc.Whole())
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, "data: "+string(enc.Chunk(0))+"\n\ndata: [DONE]\n\n")
}
