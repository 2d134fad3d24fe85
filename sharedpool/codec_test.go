package sharedpool

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// om is an ordered msgpack map for tests: pairs keep their order and may
// repeat a key.
type om [][2]any

// raw is msgpack injected verbatim.
type raw []byte

// encode writes v as msgpack. It understands nil, bool, string, int, int64,
// uint64, float64, []any, []uint64, om and raw.
func encode(t testing.TB, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	if err := writeVal(e, &buf, v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func writeVal(e *msgpack.Encoder, buf *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case nil:
		return e.EncodeNil()
	case bool:
		return e.EncodeBool(x)
	case string:
		return e.EncodeString(x)
	case int:
		return e.EncodeInt(int64(x))
	case int64:
		return e.EncodeInt(x)
	case uint64:
		return e.EncodeUint(x)
	case float64:
		return e.EncodeFloat64(x)
	case raw:
		buf.Write(x)
		return nil
	case []uint64:
		if err := e.EncodeArrayLen(len(x)); err != nil {
			return err
		}
		for _, u := range x {
			if err := e.EncodeUint(u); err != nil {
				return err
			}
		}
		return nil
	case []any:
		if err := e.EncodeArrayLen(len(x)); err != nil {
			return err
		}
		for _, el := range x {
			if err := writeVal(e, buf, el); err != nil {
				return err
			}
		}
		return nil
	case om:
		if err := e.EncodeMapLen(len(x)); err != nil {
			return err
		}
		for _, kv := range x {
			if err := writeVal(e, buf, kv[0]); err != nil {
				return err
			}
			if err := writeVal(e, buf, kv[1]); err != nil {
				return err
			}
		}
		return nil
	}
	panic("encode: unsupported test value")
}

// frames builds a ZMQ message [topic, seq, payload].
func frames(topic string, seq uint64, payload []byte) [][]byte {
	s := make([]byte, 8)
	binary.BigEndian.PutUint64(s, seq)
	return [][]byte{[]byte(topic), s, payload}
}

// objEvent is the map shape Dynamo reads: {event_type, object_key,
// tenant_id, group_id}.
func objEvent(kind, key, tenant string, group any) om {
	return om{{"event_type", kind}, {"object_key", key}, {"tenant_id", tenant}, {"group_id", group}}
}

// batchPayload wraps events as [timestamp_ms, events, dp_rank].
func batchPayload(t testing.TB, events ...any) []byte {
	return encode(t, []any{int64(1700000000123), events, 0})
}
