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
