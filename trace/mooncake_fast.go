package trace

import (
	"strconv"
)

// fastRow is what the fast Mooncake line parser extracts.
type fastRow struct {
	ts, delay       float64
	hasTS, hasDelay bool
	in, out         int64
	hasIn, hasOut   bool
	session         []byte
	hasSession      bool
}

// parseMooncakeFast parses the common shape of a Mooncake line — one flat
// object with the known keys, numbers and escape-free strings — appending
// hash ids to ids. It returns ok=false on anything else (unknown keys,
// escapes, negative or out-of-range numbers, any syntax error), and the
// caller falls back to encoding/json, which decides and words the error.
func parseMooncakeFast(line []byte, ids []uint64) (row fastRow, out []uint64, ok bool) {
	out = ids
	p := 0
	ws := func() {
		for p < len(line) && (line[p] == ' ' || line[p] == '\t' || line[p] == '\r' || line[p] == '\n') {
			p++
		}
	}
	ws()
	if p >= len(line) || line[p] != '{' {
		return row, ids, false
	}
	p++
	ws()
	if p < len(line) && line[p] == '}' {
		p++
		ws()
		return row, out, p == len(line)
	}
	for {
		ws()
		if p >= len(line) || line[p] != '"' {
			return row, ids, false
		}
		p++
		ks := p
		for p < len(line) && line[p] != '"' && line[p] != '\\' {
			p++
		}
		if p >= len(line) || line[p] != '"' {
			return row, ids, false
		}
		key := line[ks:p]
		p++
		ws()
		if p >= len(line) || line[p] != ':' {
			return row, ids, false
		}
		p++
		ws()
		switch string(key) {
		case "timestamp", "delay":
			s := p
			for p < len(line) && (line[p] >= '0' && line[p] <= '9' || line[p] == '.' || line[p] == 'e' || line[p] == 'E' || line[p] == '+' || line[p] == '-') {
				p++
			}
			if !jsonNumber(line[s:p]) {
				return row, ids, false
			}
			v, err := strconv.ParseFloat(string(line[s:p]), 64)
			if err != nil || v > maxMillis {
				return row, ids, false
			}
			if key[0] == 't' {
				row.ts, row.hasTS = v, true
			} else {
				row.delay, row.hasDelay = v, true
			}
		case "input_length", "output_length":
			s := p
			var v int64
			for p < len(line) && line[p] >= '0' && line[p] <= '9' {
				v = v*10 + int64(line[p]-'0')
				p++
				if v > MaxTokens {
					return row, ids, false
				}
			}
			if p == s || (line[s] == '0' && p-s > 1) || p < len(line) && (line[p] == '.' || line[p] == 'e' || line[p] == 'E') {
				return row, ids, false
			}
			if key[0] == 'i' {
				row.in, row.hasIn = v, true
			} else {
				row.out, row.hasOut = v, true
			}
		case "hash_ids":
			if p >= len(line) || line[p] != '[' {
				return row, ids, false
			}
			p++
			out = ids
			ws()
			if p < len(line) && line[p] == ']' {
				p++
				break
			}
			for {
				ws()
				s := p
				var v uint64
				for p < len(line) && line[p] >= '0' && line[p] <= '9' {
					d := uint64(line[p] - '0')
					if v > (1<<64-1-d)/10 {
						return row, ids, false
					}
					v = v*10 + d
					p++
				}
				if p == s || (line[s] == '0' && p-s > 1) {
					return row, ids, false
				}
				out = append(out, v)
				ws()
				if p < len(line) && line[p] == ',' {
					p++
					continue
				}
				if p < len(line) && line[p] == ']' {
					p++
					break
				}
				return row, ids, false
			}
		case "session_id":
			if p >= len(line) || line[p] != '"' {
				return row, ids, false
			}
			p++
			s := p
			for p < len(line) && line[p] != '"' && line[p] != '\\' && line[p] >= 0x20 && line[p] < 0x80 {
				p++
			}
			if p >= len(line) || line[p] != '"' {
				return row, ids, false
			}
			row.session, row.hasSession = line[s:p], true
			p++
		default:
			return row, ids, false
		}
		ws()
		if p >= len(line) {
			return row, ids, false
		}
		if line[p] == ',' {
			p++
			continue
		}
		if line[p] == '}' {
			p++
			ws()
			return row, out, p == len(line)
		}
		return row, ids, false
	}
}

// jsonNumber reports whether b is a non-negative JSON number:
// (0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func jsonNumber(b []byte) bool {
	i := 0
	digits := func() int {
		n := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(b) && b[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(b)
}
