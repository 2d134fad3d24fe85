package kvhint

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// hashTextCheck encodes env with and without c and fails when they differ.
func hashTextCheck(t testing.TB, c *HashText, env *Envelope) {
	t.Helper()
	want, err := env.AppendJSON(nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.AppendJSON([]byte("x"), env)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[1:], want) {
		t.Fatalf("cached encoding differs:\n got %s\nwant %s", got[1:], want)
	}
	body := []byte(`{"a":1}`)
	h0, t0, err0 := AppendBodyTail(nil, body, env)
	h1, t1, err1 := c.AppendBodyTail(nil, body, env)
	if h0 != h1 || !bytes.Equal(t0, t1) || (err0 == nil) != (err1 == nil) {
		t.Fatalf("AppendBodyTail differs: %d %s %v / %d %s %v", h0, t0, err0, h1, t1, err1)
	}
	h2, tail, err2 := c.BodyTail(body, env)
	if (err0 == nil) != (err2 == nil) {
		t.Fatalf("BodyTail: %v, AppendBodyTail: %v", err2, err0)
	}
	if err2 != nil {
		return
	}
	if h2 != h0 || !bytes.Equal(bytes.Join(tail.Parts, nil), t0) {
		t.Fatalf("BodyTail differs: %d %q", h2, tail.Parts)
	}
	views = append(views, view{tail.Parts, bytes.Join(tail.Parts, nil)}) // held: never released
}

// view is a BodyTail result and its bytes when it was made: the
// cache must never change bytes it handed out.
type view struct {
	parts [][]byte
	was   []byte
}

var views []view

func checkViews(t testing.TB) {
	t.Helper()
	for _, v := range views {
		if !bytes.Equal(bytes.Join(v.parts, nil), v.was) {
			t.Fatalf("a handed-out part changed: %s", v.was)
		}
	}
	views = views[:0]
}

func chainEnv(session string, signed bool, hs []uint64) *Envelope {
	return &Envelope{MessageID: "m", SessionID: session, SignedHashes: signed, Actions: []Action{
		{ID: "a", Kind: KindShare, Dest: TierDevice, Target: Target{Blocks: hs},
			Sources: []Source{{Worker: WorkerID{ID: 1}, Endpoint: "http://w1", Tier: TierDevice}}},
		{ID: "b", SessionID: "other", Kind: KindPin, TTL: 60e9, Target: Target{Blocks: hs[:min(len(hs), 40)]}}}}
}

// TestHashText: the cached encoding equals the uncached one as a session's
// chain grows, shrinks, diverges, switches spelling (signed) and is
// evicted, and the cache stays within its bound.
func TestHashText(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	chain := make([]uint64, 600)
	for i := range chain {
		chain[i] = r.Uint64()
	}
	c := NewHashText(1000)
	for _, n := range []int{10, 40, 100, 100, 512, 60, 600, 33} {
		hashTextCheck(t, c, chainEnv("s1", false, chain[:n]))
		hashTextCheck(t, c, chainEnv("s1", true, chain[:n]))
	}
	fork := diverge(chain[:300], 200, 1)
	hashTextCheck(t, c, chainEnv("s1", false, fork))
	hashTextCheck(t, c, chainEnv("s1", false, chain[:500]))
	for i := range 20 { // more sessions than fit: some are forgotten
		hashTextCheck(t, c, chainEnv(string(rune('a'+i)), false, chain[i:i+200]))
		if c.Len() > 1000 {
			t.Fatalf("cache holds %d hashes, bound 1000", c.Len())
		}
	}
	// More long lists than BodyTail splices: the rest are copied.
	many := &Envelope{MessageID: "m", SessionID: "s9"}
	for i := range maxSplices + 2 {
		many.Actions = append(many.Actions, Action{ID: string(rune('a' + i)), SessionID: string(rune('p' + i)),
			Kind: KindPin, TTL: 60e9, Target: Target{Blocks: chain[i : i+40]}})
	}
	hashTextCheck(t, c, many)
	hashTextCheck(t, c, many)
	checkViews(t)
	var nilCache *HashText
	hashTextCheck(t, nilCache, chainEnv("s1", false, chain[:100]))
	views = views[:0]
}

// TestHashTextConcurrent: concurrent encodings of shared sessions agree
// with the uncached encoding, and what was handed out never changes (run
// with -race).
func TestHashTextConcurrent(t *testing.T) {
	chain := make([]uint64, 400)
	for i := range chain {
		chain[i] = uint64(i)*0x9e3779b97f4a7c15 + 1
	}
	c := NewHashText(2000)
	body := []byte(`{"a":1}`)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []view
			for i := range 50 {
				n := 32 + (i*37+g*11)%360
				if i%7 == 3 {
					n = 100 + g // diverge from another goroutine's list
				}
				env := chainEnv(string(rune('a'+i%5)), g%2 == 0, chain[:n])
				_, want, _ := AppendBodyTail(nil, body, env)
				_, tail, err := c.BodyTail(body, env)
				if err != nil || !bytes.Equal(bytes.Join(tail.Parts, nil), want) {
					t.Errorf("goroutine %d turn %d: parts differ (%v)", g, i, err)
					return
				}
				mine = append(mine, view{tail.Parts, want})
			}
			for _, v := range mine {
				if !bytes.Equal(bytes.Join(v.parts, nil), v.was) {
					t.Errorf("a handed-out part changed")
					return
				}
			}
		}()
	}
	wg.Wait()
}

// FuzzHashText: any sequence of lists for a few sessions encodes as the
// uncached encoder does.
func FuzzHashText(f *testing.F) {
	f.Add([]byte{40, 0, 1, 60, 1, 2, 35, 0, 3})
	f.Add(bytes.Repeat([]byte{200, 2, 7}, 5))
	f.Fuzz(func(t *testing.T, ops []byte) {
		c := NewHashText(700)
		base := make([]uint64, 256)
		for i := range base {
			base[i] = uint64(i+1) * 0xbf58476d1ce4e5b9
		}
		for len(ops) >= 3 {
			n, sess, mut := int(ops[0]), ops[1]%4, ops[2]
			ops = ops[3:]
			hs := append([]uint64(nil), base[:n]...)
			if mut != 0 && n > 0 { // another chain from a block on
				hs = diverge(hs, int(mut)%n, binary.LittleEndian.Uint64([]byte{mut, 1, 2, 3, 4, 5, 6, 0x80}))
			}
			if n == 0 {
				hs = []uint64{1}
			}
			hashTextCheck(t, c, chainEnv(string(rune('a'+sess)), mut%2 == 1, hs))
			if c.Len() > 700 {
				t.Fatalf("cache holds %d hashes", c.Len())
			}
		}
		checkViews(t)
	})
}

// diverge returns a copy of hs that is another chain from block at on:
// block at's content changes by salt, and each later hash mixes in the one
// before it, as a sequence hash does.
func diverge(hs []uint64, at int, salt uint64) []uint64 {
	out := append([]uint64(nil), hs...)
	prev := salt
	for i := at; i < len(out); i++ {
		out[i] = (prev^out[i])*0x9e3779b97f4a7c15 + 1
		prev = out[i]
	}
	return out
}

// TestCommonPrefix: the bisection agrees with a hash-by-hash walk,
// wherever two chains part (at the root, at the end, anywhere, never),
// whatever their lengths, and for runs of one chain from different
// blocks (a split action's parts).
func TestCommonPrefix(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 7))
	for range 3000 {
		a := make([]uint64, r.IntN(600))
		for i := range a {
			a[i] = r.Uint64()
		}
		b := append([]uint64(nil), a[:r.IntN(len(a)+1)]...)
		b = append(b, a[len(b):min(len(a), len(b)+r.IntN(300))]...)
		if len(b) > 0 && r.IntN(2) == 0 {
			b = diverge(b, r.IntN(len(b)), 1<<r.IntN(64))
		}
		if len(a) > 0 && r.IntN(8) == 0 { // a later run of the same chain
			b = a[1+r.IntN(len(a))-1:]
		}
		want := 0
		for want < min(len(a), len(b)) && a[want] == b[want] {
			want++
		}
		if got := commonPrefix(a, b); got != want {
			t.Fatalf("commonPrefix of %d and %d hashes = %d, want %d", len(a), len(b), got, want)
		}
	}
}

// TestTailHolds: a Tail's Parts stay as they were while any hold on it
// remains, though released Tails' buffers are reused meanwhile; the last
// Release returns it, and one more panics.
func TestTailHolds(t *testing.T) {
	c := NewHashText(4000)
	body := []byte(`{"model":"m"}`)
	chain := make([]uint64, 300)
	for i := range chain {
		chain[i] = uint64(i+1) * 0x9e3779b97f4a7c15
	}
	type held struct {
		tail *Tail
		want []byte
	}
	var keep []held
	for i := range 300 {
		env := chainEnv(string(rune('a'+i%7)), i%2 == 0, chain[:1+(i*13)%299])
		env.MessageID = strings.Repeat("m", i%40) // tails of many lengths
		_, want, err := AppendBodyTail(nil, body, env)
		if err != nil {
			t.Fatal(err)
		}
		_, tail, err := c.BodyTail(body, env)
		if err != nil || !bytes.Equal(bytes.Join(tail.Parts, nil), want) {
			t.Fatalf("turn %d: %v", i, err)
		}
		switch i % 3 {
		case 0: // released at once: its buffer goes back to the pool
			tail.Release()
		case 1: // a reader holds it past the holder's release
			tail.Hold()
			tail.Release()
			keep = append(keep, held{tail, want})
		default:
			keep = append(keep, held{tail, want})
		}
	}
	for i, h := range keep {
		if !bytes.Equal(bytes.Join(h.tail.Parts, nil), h.want) {
			t.Fatalf("held tail %d changed", i)
		}
		h.tail.Release()
	}
	_, tail, err := c.BodyTail(body, chainEnv("z", false, chain[:5]))
	if err != nil {
		t.Fatal(err)
	}
	tail.Release()
	defer func() {
		if recover() == nil {
			t.Fatal("a Release past the last hold did not panic")
		}
	}()
	tail.Release()
}
