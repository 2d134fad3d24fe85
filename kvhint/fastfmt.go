package kvhint

// Fast paths for the JSON encoder's two hot loops: decimal block hashes and
// string escaping. Both are checked against strconv and encoding/json in
// fastfmt_test.go.

const digitPairs = "00010203040506070809" +
	"10111213141516171819" +
	"20212223242526272829" +
	"30313233343536373839" +
	"40414243444546474849" +
	"50515253545556575859" +
	"60616263646566676869" +
	"70717273747576777879" +
	"80818283848586878889" +
	"90919293949596979899"

// appendUint64 appends v in decimal, like strconv.AppendUint(dst, v, 10),
// but formats 8-digit chunks with 32-bit arithmetic.
func appendUint64(dst []byte, v uint64) []byte {
	var buf [20]byte
	i := len(buf)
	for v >= 1e8 {
		q := v / 1e8
		r := uint32(v - q*1e8)
		v = q
		hi, lo := r/10000, r%10000
		i -= 8
		a, b, c, d := hi/100*2, hi%100*2, lo/100*2, lo%100*2
		buf[i], buf[i+1], buf[i+2], buf[i+3] = digitPairs[a], digitPairs[a+1], digitPairs[b], digitPairs[b+1]
		buf[i+4], buf[i+5], buf[i+6], buf[i+7] = digitPairs[c], digitPairs[c+1], digitPairs[d], digitPairs[d+1]
	}
	w := uint32(v)
	for w >= 100 {
		p := w % 100 * 2
		w /= 100
		i -= 2
		buf[i], buf[i+1] = digitPairs[p], digitPairs[p+1]
	}
	if w >= 10 {
		i -= 2
		buf[i], buf[i+1] = digitPairs[w*2], digitPairs[w*2+1]
	} else {
		i--
		buf[i] = byte('0' + w)
	}
	return append(dst, buf[i:]...)
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// jsonSafe8 reports whether the 8 bytes of x (little-endian) need no JSON
// escaping: all are ASCII, >= 0x20, and neither '"' nor '\\'.
func jsonSafe8(x uint64) bool {
	ctl := (x - lsb*0x20) & ^x // high bit set where a byte < 0x20 (or >= 0x80)
	q := x ^ (lsb * '"')       // zero bytes where '"'
	bs := x ^ (lsb * '\\')     // zero bytes where '\\'
	hasQ := (q - lsb) & ^q     // high bit where q byte was zero (or >= 0x80)
	hasBS := (bs - lsb) & ^bs  // likewise for '\\'
	return (ctl|hasQ|hasBS|x)&msb == 0
}

// safePrefix returns the length of the longest prefix of s, a multiple of 8
// bytes, that needs no escaping.
func safePrefix(s string) int {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		if !jsonSafe8(x) {
			break
		}
	}
	return i
}
