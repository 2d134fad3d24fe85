package mock

import (
	"bytes"
	"encoding/json"
	"github.com/agentkv/agentkv/engine/sim"
	"io"
	"net/http"
	"strings"
	"testing"
)

func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.Speedup == 0 {
		cfg.Speedup = 1000
	}
	s, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func post(t *testing.T, url string, body any, hdr ...string) (int, []byte) {
	t.Helper()
	var b []byte
	switch v := body.(type) {
	case string:
		b = []byte(v)
	default:
		b, _ = json.Marshal(v)
	}
	req, _ := http.NewRequest("POST", url, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func words(n int, prefix string) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(prefix)
		b.WriteString(string(rune('a' + i%26)))
		b.WriteString(strings.Repeat("x", i/26))
	}
	return b.String()
}

func simConfig(bs, blocks, host int) sim.Config {
	return sim.Config{BlockSize: bs, DeviceBlocks: blocks, HostBlocks: host}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
