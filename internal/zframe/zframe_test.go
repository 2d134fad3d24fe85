package zframe

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"
)

var errFormat = errors.New("test: bad frame")

func TestRoundTrip(t *testing.T) {
	for _, level := range []zstd.EncoderLevel{zstd.SpeedFastest, zstd.SpeedDefault} {
		for range 2 { // the second round uses pooled coders
			var buf bytes.Buffer
			require.NoError(t, WriteHeader(&buf, "TEST", 7))
			e, err := Encoder(&buf, level)
			require.NoError(t, err)
			_, err = e.Write(bytes.Repeat([]byte("agentkv "), 1000))
			require.NoError(t, err)
			require.NoError(t, e.Close())
			PutEncoder(e, level)

			v, err := ReadHeader(&buf, "TEST", errFormat)
			require.NoError(t, err)
			require.Equal(t, byte(7), v)
			d, err := Decoder(&buf)
			require.NoError(t, err)
			body, err := io.ReadAll(d)
			require.NoError(t, err)
			PutDecoder(d)
			require.Equal(t, bytes.Repeat([]byte("agentkv "), 1000), body)
		}
	}
}

func TestReadHeaderErrors(t *testing.T) {
	_, err := ReadHeader(bytes.NewReader([]byte("TES")), "TEST", errFormat)
	require.ErrorIs(t, err, errFormat)
	require.ErrorContains(t, err, "header")
	_, err = ReadHeader(bytes.NewReader([]byte("NOPE\x01")), "TEST", errFormat)
	require.ErrorIs(t, err, errFormat)
	require.ErrorContains(t, err, `bad magic "NOPE"`)
}
