package gateway

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/agentkv/agentkv/engine/mock"
)

func zstdBytes(t *testing.T, b []byte) []byte {
	t.Helper()
	zw, err := zstd.NewWriter(nil)
	require.NoError(t, err)
	defer zw.Close()
	return zw.EncodeAll(b, nil)
}

func gzipBytes(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	gw := gzip.NewWriter(&buf)
	_, err := gw.Write(b)
	require.NoError(t, err)
	require.NoError(t, gw.Close())
	return buf.Bytes()
}

func postEncoded(t *testing.T, url, enc string, body []byte) (*http.Response, []byte) {
	t.Helper()
	return postJSON(t, url, map[string]string{"Content-Encoding": enc}, string(body))
}

// TestLimiterDecodesBodies: a Limiter hands the handler the decoded body
// (zstd as Codex sends it, gzip, deflate), bounded by MaxBodyBytes after
// decoding; an unknown encoding is 415 in the API's shape.
func TestLimiterDecodesBodies(t *testing.T) {
	url, _, _ := limitServer(t, ServerConfig{MaxBodyBytes: 100_000, MaxBodyBytesInFlight: 1_000_000}, nil)
	plain := []byte(`{"model":"m","input":"` + strings.Repeat("x", 5000) + `"}`)
	for enc, b := range map[string][]byte{"zstd": zstdBytes(t, plain), "gzip": gzipBytes(t, plain), "": plain} {
		resp, got := postEncoded(t, url+"/v1/responses", enc, b)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", enc, got)
		require.True(t, strings.HasPrefix(string(got), strconv.Itoa(len(plain))+" true"), "%s: the handler got %q", enc, got)
	}
	bomb := zstdBytes(t, bytes.Repeat([]byte("a"), 200_000))
	resp, b := postEncoded(t, url+"/v1/responses", "zstd", bomb)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, string(b))
	errorShape(t, false, b)
	resp, b = postEncoded(t, url+"/v1/messages", "br", plain)
	require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode, string(b))
	errorShape(t, true, b)
	resp, b = postEncoded(t, url+"/v1/responses", "zstd", []byte("not zstd at all"))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(b))
}

// TestGatewayDecodesZstd: a Codex-style zstd-compressed Responses request
// through a Stack served without a Limiter is answered as the plain one.
func TestGatewayDecodesZstd(t *testing.T) {
	m, err := mock.Start(mock.Config{Speedup: 1000})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	_, srv := testStack(t, StackConfig{}, WorkerSpec{URL: m.URL()})
	body := []byte(`{"model":"` + m.Model() + `","max_output_tokens":4,"input":"hello from codex"}`)
	resp, b := postEncoded(t, srv.URL+ResponsesPath, "zstd", zstdBytes(t, body))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Contains(t, string(b), `"status":"completed"`)
	resp, b = postEncoded(t, srv.URL+ResponsesPath, "br", body)
	require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode, string(b))
}

func FuzzDecodeBody(f *testing.F) {
	f.Add("zstd", []byte{0x28, 0xb5, 0x2f, 0xfd, 0, 0x58, 0, 0, 0})
	f.Add("gzip", []byte{0x1f, 0x8b, 8, 0})
	f.Add("deflate", []byte{1, 0, 0, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, enc string, b []byte) {
		out, err := decodeBody(enc, b, 1<<16)
		if err == nil && len(out) > 1<<16 {
			t.Fatalf("decoded %d bytes past the limit", len(out))
		}
	})
}
