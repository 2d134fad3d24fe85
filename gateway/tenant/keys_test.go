package tenant

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const sample = `# tenants
alice sk-alice-0123456789abcdef weight=2 max-in-flight=4
alice sk-alice-second-key-000000
bob   sk-bob-0123456789abcdef01 max-sessions=3 max-programs=2
ops   sk-ops-0123456789abcdef012 admin
pub   sk-pub-0123456789abcdef0123 shared-cache
`

func TestParseAndLookup(t *testing.T) {
	k, err := Parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if k.Len() != 5 || len(k.Tenants()) != 4 {
		t.Fatalf("keys %d tenants %d, want 5 and 4", k.Len(), len(k.Tenants()))
	}
	for _, tc := range []struct {
		key  string
		name string
		err  error
	}{
		{"sk-alice-0123456789abcdef", "alice", nil},
		{"sk-alice-second-key-000000", "alice", nil},
		{"sk-bob-0123456789abcdef01", "bob", nil},
		{"sk-bob-0123456789abcdef0", "", ErrBadKey},
		{"sk-bob-0123456789abcdef012", "", ErrBadKey},
		{"", "", ErrNoKey},
		{strings.Repeat("k", MaxKeyLen+1), "", ErrBadKey},
	} {
		tn, err := k.Lookup(tc.key)
		if !errors.Is(err, tc.err) || (tc.err == nil && tn.Name != tc.name) {
			t.Errorf("Lookup(%.30q) = %v, %v; want %s, %v", tc.key, tn, err, tc.name, tc.err)
		}
	}
	a, _ := k.Lookup("sk-alice-second-key-000000")
	if a.Weight != 2 || a.MaxInFlight != 4 || a.Admin || a.Salt != Salt("alice") || a.Salt == "" {
		t.Errorf("alice = %+v", a)
	}
	b, _ := k.Lookup("sk-bob-0123456789abcdef01")
	if b.Weight != 1 || b.MaxSessions != 3 || b.MaxPrograms != 2 || b.Salt == a.Salt {
		t.Errorf("bob = %+v", b)
	}
	if k.Tenant("bob") != b || k.Tenant("alice") != a || k.Tenant("carol") != nil {
		t.Errorf("Tenant by name: bob %p alice %p carol %p", k.Tenant("bob"), k.Tenant("alice"), k.Tenant("carol"))
	}
	o, _ := k.Lookup("sk-ops-0123456789abcdef012")
	p, _ := k.Lookup("sk-pub-0123456789abcdef0123")
	if !o.Admin || !p.SharedCache || p.Salt != "" {
		t.Errorf("ops %+v pub %+v", o, p)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ file, want string }{
		{"alice", "want NAME KEY"},
		{"al/ice sk-0123456789abcdef", "tenant name"},
		{"alice short", "key of 5 bytes"},
		{"alice sk-0123456789abcdef bogus", "unknown option"},
		{"alice sk-0123456789abcdef weight=0", "weight"},
		{"alice sk-0123456789abcdef weight=x", "weight"},
		{"alice sk-0123456789abcdef admin=1", "takes no value"},
		{"alice sk-0123456789abcdef\nbob sk-0123456789abcdef", "already given"},
		{"alice sk-0123456789abcdef weight=2\nalice sk-1123456789abcdef weight=3", "given twice"},
		{"x " + strings.Repeat("k", 70000), "token too long"},
	} {
		_, err := Parse(strings.NewReader(tc.file))
		if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%.40q) = %v, want %q", tc.file, err, tc.want)
		}
	}
}

func TestSetReloadKeepsOldKeysOnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(path, []byte("alice sk-alice-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if tn, err := s.Authenticate("Bearer sk-alice-0123456789abcdef", ""); err != nil || tn.Name != "alice" {
		t.Fatalf("bearer: %v %v", tn, err)
	}
	if tn, err := s.Authenticate("", "sk-alice-0123456789abcdef"); err != nil || tn.Name != "alice" {
		t.Fatalf("x-api-key: %v %v", tn, err)
	}
	if err := os.WriteFile(path, []byte("alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil {
		t.Fatal("reload of a bad file succeeded")
	}
	if _, err := s.Authenticate("bearer sk-alice-0123456789abcdef", ""); err != nil {
		t.Fatalf("a failed reload dropped the old keys: %v", err)
	}
	if err := os.WriteFile(path, []byte("bob sk-bob-0123456789abcdef01\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate("Bearer sk-alice-0123456789abcdef", ""); !errors.Is(err, ErrBadKey) {
		t.Fatalf("alice's key still works after it was removed: %v", err)
	}
	if _, err := s.Authenticate("Basic abc", ""); !errors.Is(err, ErrNoKey) {
		t.Fatalf("Basic auth: %v, want ErrNoKey", err)
	}
	if err := os.WriteFile(path, []byte("# empty\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err == nil {
		t.Fatal("a file with no keys was accepted")
	}
}

func TestScope(t *testing.T) {
	a, b := &Tenant{Name: "a"}, &Tenant{Name: "b"}
	if Scope(a, "s1") == Scope(b, "s1") || Scope(nil, "s1") != "s1" || Scope(a, "") != "" {
		t.Fatal("Scope does not separate tenants")
	}
}

func FuzzParse(f *testing.F) {
	f.Add(sample)
	f.Add("a sk-0123456789abcdef weight=1 weight=1 admin admin")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := Parse(strings.NewReader(s))
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("error not ErrSyntax: %v", err)
			}
			return
		}
		for _, tn := range k.Tenants() {
			if tn.Weight < 1 || !validName(tn.Name) || (tn.Salt == "") != tn.SharedCache {
				t.Fatalf("bad tenant %+v", tn)
			}
		}
		for _, e := range k.byDigest {
			if got, err := k.Lookup(string(e.key)); err != nil || got != e.tenant {
				t.Fatalf("key of %s does not look up: %v", e.tenant.Name, err)
			}
		}
	})
}

// BenchmarkAuthenticate: a request's key read, looked up by digest and
// compared in constant time, among n keys.
func BenchmarkAuthenticate(b *testing.B) {
	for _, n := range []int{10, 10000} {
		b.Run("keys="+strconv.Itoa(n), func(b *testing.B) {
			var f strings.Builder
			for i := 0; i < n; i++ {
				fmt.Fprintf(&f, "t%d sk-tenant-%016d\n", i%100, i)
			}
			k, err := Parse(strings.NewReader(f.String()))
			if err != nil {
				b.Fatal(err)
			}
			s := NewSet(k)
			auth := "Bearer sk-tenant-" + fmt.Sprintf("%016d", n/2)
			b.ReportAllocs()
			for b.Loop() {
				t, err := s.Authenticate(auth, "")
				if err != nil {
					b.Fatal(err)
				}
				_ = Scope(t, "session-1234")
			}
		})
	}
}
