// Package zframe is the framing the flashindex and sharedpool snapshots
// share: a magic string, a version byte, then one zstd frame, whose body
// is a sequence of fields (FieldWriter, FieldReader). Encoders and
// decoders are pooled (they are costly to build); their window is
// bounded (Window), which bounds a decoder's memory on hostile input.
// Callers bound the decompressed bytes themselves (internal/limitio).
//
// The functions are safe for concurrent use; each Encoder or Decoder
// serves one stream until it is put back, each FieldWriter or FieldReader
// one goroutine.
package zframe

import (
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Window is the zstd window of every frame written and the most a
// decoder accepts.
const Window = 1 << 22

// WriteHeader writes magic and the version byte.
func WriteHeader(w io.Writer, magic string, version byte) error {
	_, err := w.Write(append([]byte(magic), version))
	return err
}

// ReadHeader reads a header written by WriteHeader and returns its
// version; a short header or another magic is an error wrapping format.
func ReadHeader(r io.Reader, magic string, format error) (byte, error) {
	head := make([]byte, len(magic)+1)
	if _, err := io.ReadFull(r, head); err != nil {
		return 0, fmt.Errorf("%w: header: %v", format, err)
	}
	if string(head[:len(magic)]) != magic {
		return 0, fmt.Errorf("%w: bad magic %q", format, head[:len(magic)])
	}
	return head[len(magic)], nil
}

// encoders pools encoders by level (an encoder keeps its level across
// Reset).
var encoders [zstd.SpeedBestCompression + 1]sync.Pool

var decoders sync.Pool

// Encoder returns an encoder at level writing to w; give it back with
// PutEncoder once closed.
func Encoder(w io.Writer, level zstd.EncoderLevel) (*zstd.Encoder, error) {
	if e, ok := encoders[level].Get().(*zstd.Encoder); ok {
		e.Reset(w)
		return e, nil
	}
	return zstd.NewWriter(w, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(Window), zstd.WithLowerEncoderMem(true),
		zstd.WithEncoderLevel(level))
}

// PutEncoder returns an encoder made by Encoder at level to the pool.
func PutEncoder(e *zstd.Encoder, level zstd.EncoderLevel) { encoders[level].Put(e) }

// Decoder returns a decoder reading r; give it back with PutDecoder.
func Decoder(r io.Reader) (*zstd.Decoder, error) {
	if d, ok := decoders.Get().(*zstd.Decoder); ok {
		if err := d.Reset(r); err != nil {
			return nil, err
		}
		return d, nil
	}
	return zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(Window), zstd.WithDecoderLowmem(true))
}

// PutDecoder detaches d from its stream and returns it to the pool.
func PutDecoder(d *zstd.Decoder) {
	_ = d.Reset(nil)
	decoders.Put(d)
}
