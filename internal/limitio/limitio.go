// Package limitio bounds what a decompressor may produce from untrusted
// input: a cap on the bytes out, and a cap on how far they may expand the
// bytes in. flashindex (snapshots) and trace (compressed trace files) use
// it, so that a small file cannot make a reader allocate without limit.
//
// Neither type is safe for concurrent use; each wraps one stream.
package limitio

import (
	"fmt"
	"io"
)

// Counter counts the bytes read through it. Put it under a decompressor to
// count the compressed bytes the decompressor consumed (a decompressor
// reads ahead, so the count is an upper bound on what it used).
type Counter struct {
	R io.Reader
	N int64 // bytes read so far
}

func (c *Counter) Read(p []byte) (int, error) {
	n, err := c.R.Read(p)
	c.N += int64(n)
	return n, err
}

// Reader passes a decompressed stream through and fails once it has
// produced more than Max bytes, or (with Ratio > 0) more than Ratio times
// the bytes In has counted plus Slack. The failure is a *LimitError,
// returned from the Read that crossed (no byte past the cap is returned)
// and from every later one. The zero Max means no size cap.
type Reader struct {
	R     io.Reader // the decompressed stream
	In    *Counter  // the compressed bytes under R; needed when Ratio > 0
	Max   int64     // cap on the bytes produced; 0 = none
	Ratio int64     // cap on the expansion; <= 0 = none
	Slack int64     // bytes allowed beyond Ratio × In.N
	Err   error     // the sentinel the *LimitError matches (errors.Is)

	out int64
	err error
}

// Out returns the bytes produced so far.
func (l *Reader) Out() int64 { return l.out }

func (l *Reader) Read(p []byte) (int, error) {
	if l.err != nil {
		return 0, l.err
	}
	// Never ask for more than the cap allows, plus one byte to see it
	// crossed, so the decompressor does no work past the cap.
	if l.Max > 0 {
		if rest := l.Max - l.out + 1; int64(len(p)) > rest {
			p = p[:rest]
		}
	}
	n, err := l.R.Read(p)
	l.out += int64(n)
	switch {
	case l.Max > 0 && l.out > l.Max:
		l.err = &LimitError{Out: l.out, Max: l.Max, sentinel: l.Err}
	case l.Ratio > 0 && l.out > l.Ratio*l.In.N+l.Slack:
		l.err = &LimitError{Out: l.out, In: l.In.N, Ratio: l.Ratio, sentinel: l.Err}
	}
	if l.err != nil {
		return 0, l.err
	}
	return n, err
}

// LimitError reports a stream stopped by a Reader's caps.
type LimitError struct {
	Out   int64 // bytes produced when it stopped
	In    int64 // compressed bytes read, for an expansion failure
	Max   int64 // the size cap, for a size failure
	Ratio int64 // the expansion cap, for an expansion failure

	sentinel error
}

func (e *LimitError) Error() string {
	s := "input too large"
	if e.sentinel != nil {
		s = e.sentinel.Error()
	}
	if e.Max > 0 {
		return fmt.Sprintf("%s: decompressed size exceeds %d bytes", s, e.Max)
	}
	return fmt.Sprintf("%s: %d bytes decompressed from %d, more than %d times", s, e.Out, e.In, e.Ratio)
}

// Unwrap returns the Reader's Err sentinel.
func (e *LimitError) Unwrap() error { return e.sentinel }
