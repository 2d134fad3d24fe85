package kvhint

import (
	"bytes"
	"encoding/json"
	"math"
	"strconv"
	"time"

	"github.com/agentkv/agentkv/internal/jsonenc"
)

// JSON layout (field names follow Dynamo's kv_hints envelope; see doc.go):
//
//	{"protocol_version":"0.1","message_id":"m-1","session_id":"s",
//	 "actions":[{"action_id":"m-1.0","action_type":"kv.fetch","action_version":"1.0",
//	   "payload":{"session_id":"s","block_hashes":[11,22],
//	     "block_range":{"start":0,"end":8} | "token_range":{...},
//	     "dest_tier":"device","ttl_seconds":30,"priority":50,"limit_blocks":64,
//	     "source_control_endpoint":"tcp://10.0.0.7:23280",
//	     "sources":[{"worker_id":7,"dp_rank":0,"endpoint":"tcp://10.0.0.7:23280","tier":"device","prefix_blocks":2}]}}]}
//
// Zero-valued payload fields are omitted. Block hashes are bare JSON numbers
// (Dynamo's kv.fetch convention); decoders also accept decimal strings.

var rangeKeyJSON = [...]string{UnitBlocks: `"block_range":`, UnitTokens: `"token_range":`}

// appendKey appends `,"key":` (without the comma for the first field).
func appendKey(dst []byte, comma bool, key string) ([]byte, bool) {
	if comma {
		dst = append(dst, ',')
	}
	return append(dst, key...), true
}

func rangeKey(u Unit) string {
	if u == UnitTokens {
		return "token_range"
	}
	return "block_range"
}

// MarshalJSON encodes e; see AppendJSON. It has a value receiver so that
// encoding/json uses it for Envelope fields as well as *Envelope ones.
func (e Envelope) MarshalJSON() ([]byte, error) { return e.AppendJSON(nil) }

// UnmarshalJSON decodes into e; see DecodeJSON.
func (e *Envelope) UnmarshalJSON(b []byte) error { return DecodeJSON(b, e) }

// AppendJSON appends e's JSON encoding to dst. It fails (ErrInvalid) only for
// a Kind, Tier or Unit outside the defined values or a TTL outside
// [0, MaxWireTTL]; it does not otherwise Validate. Strings that are not valid
// UTF-8 are written with U+FFFD in place of bad bytes, as encoding/json does.
func (e *Envelope) AppendJSON(dst []byte) ([]byte, error) {
	return e.appendJSON(dst, nil, nil)
}

// appendJSON is AppendJSON with block-hash lists from c (nil: formatted),
// spliced in (sp) or copied.
func (e *Envelope) appendJSON(dst []byte, c *HashText, sp *splices) ([]byte, error) {
	pv := e.ProtocolVersion
	if pv == "" {
		pv = ProtocolVersion
	}
	dst = append(dst, `{"protocol_version":`...)
	dst = jsonenc.AppendString(dst, pv)
	dst = append(dst, `,"message_id":`...)
	dst = jsonenc.AppendString(dst, e.MessageID)
	if e.SessionID != "" {
		dst = append(dst, `,"session_id":`...)
		dst = jsonenc.AppendString(dst, e.SessionID)
	}
	dst = append(dst, `,"actions":[`...)
	for i := range e.Actions {
		if i > 0 {
			dst = append(dst, ',')
		}
		var err error
		if dst, err = appendActionJSON(dst, &e.Actions[i], i, e.SignedHashes, e.SessionID, c, sp); err != nil {
			return dst, err
		}
	}
	return append(dst, "]}"...), nil
}

func encodeCheck(a *Action, i int) error {
	bad := func(field, msg string) error {
		return &ValidationError{Index: i, ActionID: a.ID, Field: field, Msg: msg}
	}
	switch {
	case !a.Kind.Valid():
		return bad("action_type", "unknown kind "+a.Kind.String())
	case !a.Dest.Valid():
		return bad("dest_tier", "unknown tier "+a.Dest.String())
	case a.Target.Range.Unit > UnitTokens:
		return bad("range", "unknown unit "+a.Target.Range.Unit.String())
	case a.TTL < 0 || a.TTL > MaxWireTTL:
		return bad("ttl_seconds", a.TTL.String()+" outside [0, MaxWireTTL]")
	}
	for j := range a.Sources {
		if !a.Sources[j].Tier.Valid() {
			return bad("sources", "unknown tier "+a.Sources[j].Tier.String())
		}
	}
	return nil
}

func appendActionJSON(dst []byte, a *Action, i int, signed bool, session string, c *HashText, sp *splices) ([]byte, error) {
	if err := encodeCheck(a, i); err != nil {
		return dst, err
	}
	dst = append(dst, `{"action_id":`...)
	dst = jsonenc.AppendString(dst, a.ID)
	dst = append(dst, `,"action_type":"`...)
	dst = append(dst, a.Kind.ActionType()...)
	dst = append(dst, `","action_version":"`+ActionVersion+`","payload":{`...)
	comma := false
	if a.SessionID != "" {
		dst, comma = appendKey(dst, comma, `"session_id":`)
		dst = jsonenc.AppendString(dst, a.SessionID)
	}
	if len(a.Target.Blocks) > 0 {
		dst, comma = appendKey(dst, comma, `"block_hashes":`)
		if a.SessionID != "" {
			session = a.SessionID
		}
		dst = c.appendList(dst, session, a.Target.Blocks, signed, sp)
	}
	if r := a.Target.Range; r.Unit != UnitNone {
		dst, comma = appendKey(dst, comma, rangeKeyJSON[r.Unit])
		dst = append(dst, `{"start":`...)
		dst = strconv.AppendUint(dst, r.Start, 10)
		if r.End != 0 {
			dst = append(dst, `,"end":`...)
			dst = strconv.AppendUint(dst, r.End, 10)
		}
		dst = append(dst, '}')
	}
	if a.Dest != TierNone {
		dst, comma = appendKey(dst, comma, `"dest_tier":`)
		dst = append(dst, '"')
		dst = append(dst, a.Dest.String()...)
		dst = append(dst, '"')
	}
	if a.TTL != 0 {
		dst, comma = appendKey(dst, comma, `"ttl_seconds":`)
		dst = appendSeconds(dst, a.TTL)
	}
	if a.Priority != 0 {
		dst, comma = appendKey(dst, comma, `"priority":`)
		dst = strconv.AppendInt(dst, int64(a.Priority), 10)
	}
	if a.Limit != 0 {
		dst, comma = appendKey(dst, comma, `"limit_blocks":`)
		dst = strconv.AppendUint(dst, uint64(a.Limit), 10)
	}
	if len(a.Sources) > 0 {
		// Dynamo's kv.fetch payload names a single endpoint; older
		// consumers read only this field.
		dst, comma = appendKey(dst, comma, `"source_control_endpoint":`)
		dst = jsonenc.AppendString(dst, a.Sources[0].Endpoint)
		dst, comma = appendKey(dst, comma, `"sources":`)
		dst = append(dst, '[')
		for j := range a.Sources {
			s := &a.Sources[j]
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"worker_id":`...)
			dst = strconv.AppendUint(dst, s.Worker.ID, 10)
			dst = append(dst, `,"dp_rank":`...)
			dst = strconv.AppendUint(dst, uint64(s.Worker.DPRank), 10)
			dst = append(dst, `,"endpoint":`...)
			dst = jsonenc.AppendString(dst, s.Endpoint)
			if s.Tier != TierNone {
				dst = append(dst, `,"tier":"`...)
				dst = append(dst, s.Tier.String()...)
				dst = append(dst, '"')
			}
			if s.Blocks != 0 {
				dst = append(dst, `,"prefix_blocks":`...)
				dst = strconv.AppendUint(dst, uint64(s.Blocks), 10)
			}
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	}
	return append(dst, "}}"...), nil
}

// appendSeconds writes d as a decimal number of seconds. Whole and
// millisecond-exact durations are written without float formatting
// ("30", "2.5", "0.001"); others use the shortest float that round-trips.
func appendSeconds(dst []byte, d time.Duration) []byte {
	if d%time.Millisecond == 0 {
		ms := int64(d / time.Millisecond)
		dst = strconv.AppendInt(dst, ms/1000, 10)
		if frac := ms % 1000; frac != 0 {
			dst = append(dst, '.')
			digits := [3]byte{byte('0' + frac/100), byte('0' + frac/10%10), byte('0' + frac%10)}
			n := 3
			for digits[n-1] == '0' {
				n--
			}
			dst = append(dst, digits[:n]...)
		}
		return dst
	}
	return strconv.AppendFloat(dst, d.Seconds(), 'g', -1, 64)
}

// secondsToDuration converts wire seconds; ok is false outside [0, MaxWireTTL].
func secondsToDuration(s float64) (time.Duration, bool) {
	if math.IsNaN(s) || s < 0 || s > MaxWireTTL.Seconds() {
		return 0, false
	}
	return time.Duration(math.Round(s * 1e9)), true
}

// Wire shapes for decoding. Pointers distinguish absent from zero where the
// schema requires a field.
type jsonEnvelope struct {
	ProtocolVersion *string           `json:"protocol_version"`
	MessageID       *string           `json:"message_id"`
	SessionID       string            `json:"session_id"`
	Actions         []json.RawMessage `json:"actions"`
}

type jsonAction struct {
	ActionID      *string         `json:"action_id"`
	ActionType    *string         `json:"action_type"`
	ActionVersion *string         `json:"action_version"`
	Payload       json.RawMessage `json:"payload"`
}

type jsonRange struct {
	Start uint64 `json:"start"`
	End   uint64 `json:"end"`
}

type jsonSource struct {
	WorkerID     uint64  `json:"worker_id"`
	DPRank       uint32  `json:"dp_rank"`
	Endpoint     string  `json:"endpoint"`
	Tier         *string `json:"tier"`
	PrefixBlocks uint32  `json:"prefix_blocks"`
}

type jsonPayload struct {
	SessionID             string          `json:"session_id"`
	BlockHashes           json.RawMessage `json:"block_hashes"`
	BlockRange            *jsonRange      `json:"block_range"`
	TokenRange            *jsonRange      `json:"token_range"`
	DestTier              *string         `json:"dest_tier"`
	TTLSeconds            *float64        `json:"ttl_seconds"`
	Priority              int32           `json:"priority"`
	LimitBlocks           uint32          `json:"limit_blocks"`
	SourceControlEndpoint *string         `json:"source_control_endpoint"`
	Sources               []jsonSource    `json:"sources"`
}

// parseHashes reads a JSON array of block hashes, each a JSON number or a
// decimal string (as some routers write u64 hashes to spare JavaScript
// readers). raw is already known to be valid JSON.
func parseHashes(raw []byte) ([]uint64, error) {
	i := skipSpace(raw, 0)
	if i == len(raw) || raw[i] == 'n' { // absent or null
		return nil, nil
	}
	if i >= len(raw) || raw[i] != '[' {
		return nil, payloadError("block_hashes is not an array")
	}
	var out []uint64
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == ']' {
		return nil, nil
	}
	for {
		quoted := i < len(raw) && raw[i] == '"'
		if quoted {
			i++
		}
		neg := i < len(raw) && raw[i] == '-'
		if neg {
			i++
		}
		start := i
		var v uint64
		for ; i < len(raw) && raw[i] >= '0' && raw[i] <= '9'; i++ {
			d := uint64(raw[i] - '0')
			if v > (1<<64-1-d)/10 {
				return nil, payloadError("block hash overflows uint64")
			}
			v = v*10 + d
		}
		if i == start || quoted && (i >= len(raw) || raw[i] != '"') {
			return nil, payloadError("block hash is not an integer")
		}
		if quoted {
			i++
		}
		if neg {
			// A signed int64 name (SGLang's hash_str_to_int64): keep its bits.
			if v > 1<<63 {
				return nil, payloadError("negative block hash below the int64 range")
			}
			v = -v
		}
		out = append(out, v)
		i = skipSpace(raw, i)
		if i >= len(raw) {
			return nil, payloadError("unterminated block_hashes")
		}
		switch raw[i] {
		case ',':
			i = skipSpace(raw, i+1)
		case ']':
			return out, nil
		default:
			return nil, payloadError("block hash is not an integer")
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func jsonErr(msg string) error { return &DecodeError{Format: "json", Offset: -1, Msg: msg} }

// firstByte returns the first non-space byte of b, or 0.
func firstByte(b []byte) byte {
	b = bytes.TrimLeft(b, " \t\r\n")
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

// DecodeJSON decodes a JSON envelope into e, replacing its contents.
//
// The envelope must be an object with string protocol_version and message_id
// and an actions array of objects, each with string action_id, action_type
// and action_version; anything else is a *DecodeError (ErrMalformed) and e is
// left zero. Individual actions are skipped, not fatal, and listed in
// e.Skipped: unknown action types, action versions whose major number is not
// 1, and known actions whose payload cannot be read. The protocol_version is
// recorded but does not gate actions (each carries its own version). An
// action without a payload session_id takes the envelope's. Unknown fields
// are ignored. The result is not validated; call Validate.
func DecodeJSON(b []byte, e *Envelope) error {
	*e = Envelope{}
	if firstByte(b) != '{' {
		return jsonErr("envelope is not a JSON object")
	}
	var w jsonEnvelope
	if err := json.Unmarshal(b, &w); err != nil {
		return jsonErr(err.Error())
	}
	if w.ProtocolVersion == nil {
		return jsonErr("missing protocol_version")
	}
	if w.MessageID == nil {
		return jsonErr("missing message_id")
	}
	if len(w.Actions) > MaxWireActions {
		return jsonErr(strconv.Itoa(len(w.Actions)) + " actions, more than MaxWireActions (" + strconv.Itoa(MaxWireActions) + ")")
	}
	out := Envelope{ProtocolVersion: *w.ProtocolVersion, MessageID: *w.MessageID, SessionID: w.SessionID}
	if len(w.Actions) > 0 {
		out.Actions = make([]Action, 0, len(w.Actions))
	}
	for i, raw := range w.Actions {
		// Decoded one at a time, once their number is known to be sane.
		var action jsonAction
		if err := json.Unmarshal(raw, &action); err != nil {
			return jsonErr("action " + strconv.Itoa(i) + ": " + err.Error())
		}
		wa := &action
		if wa.ActionID == nil || wa.ActionType == nil || wa.ActionVersion == nil {
			return jsonErr("action " + strconv.Itoa(i) + ": missing action_id, action_type or action_version")
		}
		skip := Skip{Index: i, ActionID: *wa.ActionID, ActionType: *wa.ActionType, ActionVersion: *wa.ActionVersion}
		kind, ok := KindOf(*wa.ActionType)
		if !ok {
			skip.Reason = SkipUnknownType
			out.Skipped = append(out.Skipped, skip)
			continue
		}
		if major, ok := versionMajor(*wa.ActionVersion); !ok {
			skip.Reason, skip.Detail = SkipMalformed, "action_version is not MAJOR.MINOR"
			out.Skipped = append(out.Skipped, skip)
			continue
		} else if major != 1 {
			skip.Reason = SkipVersion
			out.Skipped = append(out.Skipped, skip)
			continue
		}
		a := Action{ID: *wa.ActionID, Kind: kind}
		if err := decodePayloadJSON(wa.Payload, &a); err != nil {
			skip.Reason, skip.Detail = SkipMalformed, err.Error()
			out.Skipped = append(out.Skipped, skip)
			continue
		}
		if a.SessionID == "" {
			a.SessionID = out.SessionID
		}
		out.Actions = append(out.Actions, a)
	}
	*e = out
	return nil
}

// versionMajor parses "MAJOR.MINOR" (or "MAJOR") and returns MAJOR.
func versionMajor(v string) (uint64, bool) {
	dot := len(v)
	for i := 0; i < len(v); i++ {
		if v[i] == '.' {
			dot = i
			break
		}
	}
	major, err := strconv.ParseUint(v[:dot], 10, 32)
	if err != nil {
		return 0, false
	}
	if dot < len(v) {
		if _, err := strconv.ParseUint(v[dot+1:], 10, 32); err != nil {
			return 0, false
		}
	}
	return major, true
}

type payloadError string

func (e payloadError) Error() string { return string(e) }

func decodePayloadJSON(raw json.RawMessage, a *Action) error {
	switch firstByte(raw) {
	case 0, 'n': // absent or null (raw is valid JSON): an empty payload, as Dynamo's kv.deref has
		return nil
	case '{':
	default:
		return payloadError("payload is not an object")
	}
	var p jsonPayload
	if err := json.Unmarshal(raw, &p); err != nil {
		return payloadError(err.Error())
	}
	a.SessionID = p.SessionID
	blocks, err := parseHashes(p.BlockHashes)
	if err != nil {
		return err
	}
	a.Target.Blocks = blocks
	if p.BlockRange != nil && p.TokenRange != nil {
		return payloadError("both block_range and token_range")
	}
	if r := p.BlockRange; r != nil {
		a.Target.Range = Range{Unit: UnitBlocks, Start: r.Start, End: r.End}
	}
	if r := p.TokenRange; r != nil {
		a.Target.Range = Range{Unit: UnitTokens, Start: r.Start, End: r.End}
	}
	if p.DestTier != nil {
		t, ok := ParseTier(*p.DestTier)
		if !ok {
			return payloadError("unknown dest_tier " + strconv.Quote(*p.DestTier))
		}
		a.Dest = t
	}
	if p.TTLSeconds != nil {
		d, ok := secondsToDuration(*p.TTLSeconds)
		if !ok {
			return payloadError("ttl_seconds outside [0, MaxWireTTL]")
		}
		a.TTL = d
	}
	a.Priority = p.Priority
	a.Limit = p.LimitBlocks
	if len(p.Sources) > 0 {
		a.Sources = make([]Source, len(p.Sources))
		for i, s := range p.Sources {
			a.Sources[i] = Source{Worker: WorkerID{ID: s.WorkerID, DPRank: s.DPRank}, Endpoint: s.Endpoint, Blocks: s.PrefixBlocks}
			if s.Tier != nil {
				t, ok := ParseTier(*s.Tier)
				if !ok {
					return payloadError("unknown source tier " + strconv.Quote(*s.Tier))
				}
				a.Sources[i].Tier = t
			}
		}
	} else if p.SourceControlEndpoint != nil {
		// Dynamo's shape: one endpoint, no worker identity.
		a.Sources = []Source{{Endpoint: *p.SourceControlEndpoint}}
	}
	return nil
}
