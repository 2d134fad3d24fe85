package gateway

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// Compressed request bodies. Codex sends its requests zstd-compressed
// (Content-Encoding: zstd) when request compression is on; other clients
// send gzip or deflate. The gateway decodes the body once, bounded by
// MaxBodyBytes after decoding (a small body that expands past it is 413,
// as a large one is), and forwards it decoded.

// errEncoding reports a Content-Encoding the gateway cannot decode.
var errEncoding = errors.New("unsupported Content-Encoding")

// decodeBody returns body decoded as enc says ("" or identity: as is),
// at most limit bytes; a body that decodes to more is *http.MaxBytesError.
func decodeBody(enc string, body []byte, limit int64) ([]byte, error) {
	enc = strings.ToLower(strings.TrimSpace(enc))
	var r io.Reader
	switch enc {
	case "", "identity":
		return body, nil
	case "zstd":
		zr, err := zstd.NewReader(bytes.NewReader(body), zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxMemory(uint64(limit)+1), zstd.WithDecoderMaxWindow(min(uint64(limit)+1, 1<<27)))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		defer zr.Close()
		r = zr
	case "gzip", "x-gzip":
		gr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		r = gr
	case "deflate":
		r = flate.NewReader(bytes.NewReader(body))
	default:
		return nil, fmt.Errorf("%w %q (gzip, deflate and zstd are)", errEncoding, enc)
	}
	out, err := io.ReadAll(io.LimitReader(r, limit+1))
	if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	if err != nil {
		return nil, fmt.Errorf("decoding the %s request body: %w", enc, err)
	}
	if int64(len(out)) > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	return out, nil
}
