package kvhint

import (
	"encoding/json"
	"math"
	"strconv"

	"github.com/agentkv/agentkv/internal/jsonenc"
)

// Outcome is what an engine did with one action. Engines own their memory:
// every hint may be clipped, deferred or refused.
type Outcome uint8

const (
	// OutcomeAccepted: applied (or scheduled) as asked.
	OutcomeAccepted Outcome = iota + 1
	// OutcomeClipped: applied with smaller parameters (a shorter TTL or
	// lease, fewer blocks, a lower priority); Blocks says how many.
	OutcomeClipped
	// OutcomeDeferred: accepted for later (e.g. at request completion, or
	// when memory frees up).
	OutcomeDeferred
	// OutcomeRejected: refused (unsupported, invalid, over budget); Reason
	// says why.
	OutcomeRejected
	// OutcomeMissing: none of the target blocks were present, so there was
	// nothing to act on.
	OutcomeMissing

	numOutcomes = int(OutcomeMissing) + 1
)

var outcomeNames = [numOutcomes]string{"", "accepted", "clipped", "deferred", "rejected", "missing"}

// String returns the wire name ("accepted", "clipped", ...).
func (o Outcome) String() string {
	if o.Valid() {
		return outcomeNames[o]
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Valid reports whether o is one of the five outcomes.
func (o Outcome) Valid() bool { return o >= OutcomeAccepted && o <= OutcomeMissing }

// ParseOutcome maps a wire name to an Outcome.
func ParseOutcome(s string) (Outcome, bool) {
	for i := 1; i < numOutcomes; i++ {
		if outcomeNames[i] == s {
			return Outcome(i), true
		}
	}
	return 0, false
}

// Result is an engine's answer to one action.
type Result struct {
	ActionID string
	Outcome  Outcome
	Blocks   uint32 // blocks acted on (for Missing: 0; for Clipped: after clipping)
	Reason   string // optional, free text
}

// Reply is an engine's answer to one envelope. Like Envelope it is a plain
// value: safe to read concurrently, not to mutate concurrently.
type Reply struct {
	ProtocolVersion string // encoders write ProtocolVersion when empty
	MessageID       string // the envelope's message id
	Results         []Result
	// Skipped counts results a decoder dropped because their outcome is
	// not one this package knows (a newer engine). Encoders ignore it.
	Skipped int
}

// Counts tallies results by outcome, and the blocks they acted on.
type Counts struct {
	Accepted, Clipped, Deferred, Rejected, Missing int
	Blocks                                         uint64 // sum of Result.Blocks
}

// Total is the number of results counted.
func (c Counts) Total() int { return c.Accepted + c.Clipped + c.Deferred + c.Rejected + c.Missing }

// Add adds o to c (for aggregating replies).
func (c *Counts) Add(o Counts) {
	c.Accepted += o.Accepted
	c.Clipped += o.Clipped
	c.Deferred += o.Deferred
	c.Rejected += o.Rejected
	c.Missing += o.Missing
	c.Blocks += o.Blocks
}

// Counts tallies r.Results. Results with an invalid Outcome are not counted.
func (r *Reply) Counts() Counts {
	var c Counts
	for i := range r.Results {
		res := &r.Results[i]
		switch res.Outcome {
		case OutcomeAccepted:
			c.Accepted++
		case OutcomeClipped:
			c.Clipped++
		case OutcomeDeferred:
			c.Deferred++
		case OutcomeRejected:
			c.Rejected++
		case OutcomeMissing:
			c.Missing++
		default:
			continue
		}
		c.Blocks += uint64(res.Blocks)
	}
	return c
}

// AppendJSON appends r's JSON encoding to dst:
//
//	{"protocol_version":"0.1","message_id":"m-1",
//	 "results":[{"action_id":"m-1.0","outcome":"clipped","blocks":12,"reason":"ttl"}],
//	 "counts":{"accepted":0,"clipped":1,"deferred":0,"rejected":0,"missing":0,"blocks":12}}
//
// "counts" is derived from the results for human readers; decoders ignore
// it. A result with an invalid Outcome is an error (ErrInvalid).
func (r *Reply) AppendJSON(dst []byte) ([]byte, error) {
	pv := r.ProtocolVersion
	if pv == "" {
		pv = ProtocolVersion
	}
	dst = append(dst, `{"protocol_version":`...)
	dst = jsonenc.AppendString(dst, pv)
	dst = append(dst, `,"message_id":`...)
	dst = jsonenc.AppendString(dst, r.MessageID)
	dst = append(dst, `,"results":[`...)
	for i := range r.Results {
		res := &r.Results[i]
		if !res.Outcome.Valid() {
			return dst, &ValidationError{Index: i, ActionID: res.ActionID, Field: "outcome", Msg: "unknown " + res.Outcome.String()}
		}
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"action_id":`...)
		dst = jsonenc.AppendString(dst, res.ActionID)
		dst = append(dst, `,"outcome":"`...)
		dst = append(dst, res.Outcome.String()...)
		dst = append(dst, `","blocks":`...)
		dst = strconv.AppendUint(dst, uint64(res.Blocks), 10)
		if res.Reason != "" {
			dst = append(dst, `,"reason":`...)
			dst = jsonenc.AppendString(dst, res.Reason)
		}
		dst = append(dst, '}')
	}
	c := r.Counts()
	dst = append(dst, `],"counts":{"accepted":`...)
	dst = strconv.AppendInt(dst, int64(c.Accepted), 10)
	dst = append(dst, `,"clipped":`...)
	dst = strconv.AppendInt(dst, int64(c.Clipped), 10)
	dst = append(dst, `,"deferred":`...)
	dst = strconv.AppendInt(dst, int64(c.Deferred), 10)
	dst = append(dst, `,"rejected":`...)
	dst = strconv.AppendInt(dst, int64(c.Rejected), 10)
	dst = append(dst, `,"missing":`...)
	dst = strconv.AppendInt(dst, int64(c.Missing), 10)
	dst = append(dst, `,"blocks":`...)
	dst = strconv.AppendUint(dst, c.Blocks, 10)
	return append(dst, "}}"...), nil
}

// MarshalJSON encodes r; see AppendJSON. It has a value receiver so that
// encoding/json uses it for Reply fields as well as *Reply ones.
func (r Reply) MarshalJSON() ([]byte, error) { return r.AppendJSON(nil) }

// UnmarshalJSON decodes into r; see DecodeReplyJSON.
func (r *Reply) UnmarshalJSON(b []byte) error { return DecodeReplyJSON(b, r) }

type jsonReply struct {
	ProtocolVersion *string           `json:"protocol_version"`
	MessageID       *string           `json:"message_id"`
	Results         []json.RawMessage `json:"results"`
}

type jsonReplyEntry struct {
	ActionID *string `json:"action_id"`
	Outcome  *string `json:"outcome"`
	Blocks   uint32  `json:"blocks"`
	Reason   string  `json:"reason"`
}

// DecodeReplyJSON decodes a JSON reply into r, replacing its contents. A
// missing protocol_version, message_id, or a result without string action_id
// and outcome is a *DecodeError; a result with an unknown outcome is dropped
// and counted in r.Skipped.
func DecodeReplyJSON(b []byte, r *Reply) error {
	*r = Reply{}
	if firstByte(b) != '{' {
		return jsonErr("reply is not a JSON object")
	}
	var w jsonReply
	if err := json.Unmarshal(b, &w); err != nil {
		return jsonErr(err.Error())
	}
	if w.ProtocolVersion == nil || w.MessageID == nil {
		return jsonErr("reply: missing protocol_version or message_id")
	}
	if len(w.Results) > MaxWireActions {
		return jsonErr(strconv.Itoa(len(w.Results)) + " results, more than MaxWireActions (" + strconv.Itoa(MaxWireActions) + ")")
	}
	out := Reply{ProtocolVersion: *w.ProtocolVersion, MessageID: *w.MessageID}
	if len(w.Results) > 0 {
		out.Results = make([]Result, 0, len(w.Results))
	}
	for i, raw := range w.Results {
		var e jsonReplyEntry
		if err := json.Unmarshal(raw, &e); err != nil {
			return jsonErr("result " + strconv.Itoa(i) + ": " + err.Error())
		}
		if e.ActionID == nil || e.Outcome == nil {
			return jsonErr("result " + strconv.Itoa(i) + ": missing action_id or outcome")
		}
		o, ok := ParseOutcome(*e.Outcome)
		if !ok {
			out.Skipped++
			continue
		}
		out.Results = append(out.Results, Result{ActionID: *e.ActionID, Outcome: o, Blocks: e.Blocks, Reason: e.Reason})
	}
	*r = out
	return nil
}

// Binary reply layout (format 1):
//
//	reply:  [format=1, protocol_version, message_id, [result...]]
//	result: [action_id, outcome, blocks, reason]

const (
	binReplyFields  = 4
	binResultFields = 4
)

// AppendBinary appends r's MessagePack encoding to dst. A result with an
// invalid Outcome is an error (ErrInvalid).
func (r *Reply) AppendBinary(dst []byte) ([]byte, error) {
	pv := r.ProtocolVersion
	if pv == "" {
		pv = ProtocolVersion
	}
	dst = append(dst, 0x90|binReplyFields, BinaryFormat)
	dst = mpAppendStr(dst, pv)
	dst = mpAppendStr(dst, r.MessageID)
	dst = mpAppendArrayLen(dst, len(r.Results))
	for i := range r.Results {
		res := &r.Results[i]
		if !res.Outcome.Valid() {
			return dst, &ValidationError{Index: i, ActionID: res.ActionID, Field: "outcome", Msg: "unknown " + res.Outcome.String()}
		}
		dst = append(dst, 0x90|binResultFields)
		dst = mpAppendStr(dst, res.ActionID)
		dst = append(dst, byte(res.Outcome))
		dst = mpAppendUint(dst, uint64(res.Blocks))
		dst = mpAppendStr(dst, res.Reason)
	}
	return dst, nil
}

// DecodeBinaryReply decodes a MessagePack reply into r, replacing its
// contents, with the rules of DecodeReplyJSON. Newer writers may append
// fields to either array; they are skipped.
func DecodeBinaryReply(b []byte, r *Reply) error {
	*r = Reply{}
	rd := mpReader{b: b}
	n := rd.arrayLen()
	format := rd.uint()
	if rd.err == nil && n < binReplyFields {
		rd.fail("reply has " + strconv.Itoa(n) + " fields, want " + strconv.Itoa(binReplyFields))
	}
	if rd.err == nil && format != BinaryFormat {
		rd.fail("format " + strconv.FormatUint(format, 10) + ", this decoder reads " + strconv.Itoa(BinaryFormat))
		rd.err.err = ErrVersion
	}
	out := Reply{ProtocolVersion: rd.str(), MessageID: rd.str()}
	nr := rd.arrayLen()
	if rd.err == nil && nr > MaxWireActions {
		rd.fail(strconv.Itoa(nr) + " results, more than MaxWireActions (" + strconv.Itoa(MaxWireActions) + ")")
	}
	if nr > 0 && rd.err == nil {
		out.Results = make([]Result, 0, min(nr, DefaultMaxActions))
	}
	for i := 0; i < nr && rd.err == nil; i++ {
		m := rd.arrayLen()
		if rd.err == nil && m < binResultFields {
			rd.fail("result has " + strconv.Itoa(m) + " fields")
		}
		res := Result{ActionID: rd.str()}
		o := rd.uint()
		res.Blocks = rd.uint32()
		res.Reason = rd.str()
		for k := binResultFields; k < m && rd.err == nil; k++ {
			rd.skip(0)
		}
		if rd.err != nil {
			break
		}
		if o > math.MaxUint8 || !Outcome(o).Valid() {
			out.Skipped++
			continue
		}
		res.Outcome = Outcome(o)
		out.Results = append(out.Results, res)
	}
	for i := binReplyFields; i < n && rd.err == nil; i++ {
		rd.skip(0)
	}
	if rd.err == nil && rd.off != len(b) {
		rd.fail("trailing bytes after reply")
	}
	if rd.err != nil {
		return rd.err
	}
	*r = out
	return nil
}
