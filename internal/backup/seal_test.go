package backup

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"testing"

	"github.com/orderstore/orderstore/embedded"
)

const testKey = "0123456789abcdef0123456789abcdef"

func seal(t *testing.T, plain []byte, key, cipherName string) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := NewSealWriter(&b, key, cipherName)
	if err != nil {
		t.Fatal(err)
	}
	// In uneven writes, as a snapshot arrives.
	for p := plain; len(p) > 0; {
		k := min(len(p), 7919)
		if _, err := w.Write(p[:k]); err != nil {
			t.Fatal(err)
		}
		p = p[k:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func open(sealed []byte, key string) ([]byte, error) {
	r, err := NewOpenReader(bytes.NewReader(sealed), key)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

// A sealed file opens to what was sealed, with either cipher, at every
// size around the chunk boundary, and holds none of it in plain text.
func TestSealRoundTrip(t *testing.T) {
	for _, c := range []string{embedded.CipherChaCha, embedded.CipherAES} {
		for _, n := range []int{0, 1, sealChunk - 1, sealChunk, sealChunk + 1, 3*sealChunk + 17} {
			plain := bytes.Repeat([]byte("order-payload "), n/14+1)[:n]
			sealed := seal(t, plain, testKey, c)
			if n > 0 && bytes.Contains(sealed, []byte("order-payload")) {
				t.Errorf("%s, %d bytes: the plain text is in the sealed file", c, n)
			}
			got, err := open(sealed, testKey)
			if err != nil || !bytes.Equal(got, plain) {
				t.Errorf("%s, %d bytes: opened %d bytes, %v", c, n, len(got), err)
			}
		}
	}
}

// Another key is told apart from damage; a cut, a flipped byte, data
// appended or a dropped chunk fail to open.
func TestSealRefusesWrongKeyAndDamage(t *testing.T) {
	plain := make([]byte, 3*sealChunk+100)
	rand.Read(plain)
	sealed := seal(t, plain, testKey, embedded.CipherChaCha)
	if _, err := open(sealed, testKey+"x"); !errors.Is(err, ErrWrongKey) {
		t.Errorf("another key: %v, want ErrWrongKey", err)
	}
	hdr := len(sealMagic) + 1 + 64
	chunk := 4 + sealChunk + 16
	for name, damaged := range map[string][]byte{
		"cut in the last chunk": sealed[:len(sealed)-10],
		"last chunk dropped":    sealed[:hdr+3*chunk],
		"a byte flipped":        func() []byte { d := bytes.Clone(sealed); d[hdr+chunk+100] ^= 1; return d }(),
		"data appended":         append(bytes.Clone(sealed), 'x'),
		"a chunk dropped":       append(bytes.Clone(sealed[:hdr+chunk]), sealed[hdr+2*chunk:]...),
		"not sealed":            plain,
	} {
		if got, err := open(damaged, testKey); err == nil {
			t.Errorf("%s: opened %d bytes, want an error", name, len(got))
		}
	}
}
