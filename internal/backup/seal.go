package backup

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/orderstore/orderstore/embedded"
)

// A sealed file is a backup file encrypted with the store's key, so that a backup of an encrypted
// store is no more readable than the store (a JetStream snapshot is plain text). Its layout:
//
//	magic (sealMagic) | cipher (1 byte) | salt (32) | key check (32)
//	then chunks: length (4 bytes, big-endian) | sealed chunk
//
// Each chunk seals up to sealChunk bytes with a key derived from the store's key and the salt
// (HKDF-SHA256); its nonce counts the chunks and marks the last one, so that a reordered, dropped
// or cut chunk fails to open. The key check (an HMAC of the salt) tells a wrong key from damage.
const (
	sealMagic = "orderstore sealed backup file v1\n"
	sealChunk = 64 << 10
)

// ErrWrongKey is returned when a sealed file was sealed with another key.
var ErrWrongKey = errors.New("the key does not open this backup: it was sealed with another key")

// sealKeys derives a file's AEAD and key check from the store's key.
func sealKeys(id byte, key string, salt []byte) (cipher.AEAD, []byte, error) {
	fk, err := hkdf.Key(sha256.New, []byte(key), salt, "orderstore backup file key", 32)
	if err != nil {
		return nil, nil, err
	}
	m := hmac.New(sha256.New, []byte(key))
	m.Write(append([]byte("orderstore backup key check"), salt...))
	check := m.Sum(nil)
	switch id {
	case 1:
		a, err := chacha20poly1305.New(fk)
		return a, check, err
	case 2:
		b, _ := aes.NewCipher(fk) // fails only for a key not 16, 24 or 32 bytes long
		a, err := cipher.NewGCM(b)
		return a, check, err
	}
	return nil, nil, fmt.Errorf("unknown cipher %d", id)
}

// chunkNonce is chunk n's nonce; the last chunk's has its first byte set.
func chunkNonce(size int, n uint64, last bool) []byte {
	nonce := make([]byte, size)
	binary.BigEndian.PutUint64(nonce[size-8:], n)
	if last {
		nonce[0] = 1
	}
	return nonce
}

// sealWriter seals what is written to it into w. Close seals the last
// chunk (it must be called, or the file does not open).
type sealWriter struct {
	w    io.Writer
	aead cipher.AEAD
	buf  []byte
	n    uint64
}

// NewSealWriter writes a sealed file to w, with the store's key and cipher.
func NewSealWriter(w io.Writer, key, cipherName string) (io.WriteCloser, error) {
	// The cipher's id in the header (sealKeys).
	id := map[string]byte{embedded.CipherChaCha: 1, "": 1, embedded.CipherAES: 2}[cipherName]
	if id == 0 {
		return nil, fmt.Errorf("cipher %q: want %q or %q", cipherName, embedded.CipherChaCha, embedded.CipherAES)
	}
	salt := make([]byte, 32)
	rand.Read(salt) // never fails
	aead, check, err := sealKeys(id, key, salt)
	if err != nil {
		return nil, err
	}
	hdr := append(append(append([]byte(sealMagic), id), salt...), check...)
	if _, err := w.Write(hdr); err != nil {
		return nil, err
	}
	return &sealWriter{w: w, aead: aead, buf: make([]byte, 0, sealChunk)}, nil
}

func (s *sealWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		if len(s.buf) == sealChunk {
			if err := s.flush(false); err != nil {
				return written, err
			}
		}
		k := min(sealChunk-len(s.buf), len(p))
		s.buf = append(s.buf, p[:k]...)
		p, written = p[k:], written+k
	}
	return written, nil
}

func (s *sealWriter) flush(last bool) error {
	// The length, then the chunk sealed in place after it.
	out := s.aead.Seal(make([]byte, 4, 4+len(s.buf)+s.aead.Overhead()), chunkNonce(s.aead.NonceSize(), s.n, last), s.buf, nil)
	binary.BigEndian.PutUint32(out, uint32(len(out)-4))
	if _, err := s.w.Write(out); err != nil {
		return err
	}
	s.n, s.buf = s.n+1, s.buf[:0]
	return nil
}

func (s *sealWriter) Close() error { return s.flush(true) }

// openReader reads a sealed file's plain text.
type openReader struct {
	r     *bufio.Reader
	aead  cipher.AEAD
	n     uint64
	plain []byte
	done  bool
}

// NewOpenReader reads the plain text of the sealed file r with the store's
// key; ErrWrongKey if another key sealed it.
func NewOpenReader(r io.Reader, key string) (io.Reader, error) {
	br := bufio.NewReader(r)
	hdr := make([]byte, len(sealMagic)+1+32+32)
	if _, err := io.ReadFull(br, hdr); err != nil || string(hdr[:len(sealMagic)]) != sealMagic {
		return nil, errors.New("not a sealed backup file (damaged, or from a plain store)")
	}
	id, salt, check := hdr[len(sealMagic)], hdr[len(sealMagic)+1:len(sealMagic)+33], hdr[len(sealMagic)+33:]
	aead, want, err := sealKeys(id, key, salt)
	if err != nil {
		return nil, err
	}
	if !hmac.Equal(check, want) {
		return nil, ErrWrongKey
	}
	return &openReader{r: br, aead: aead}, nil
}

func (o *openReader) Read(p []byte) (int, error) {
	for len(o.plain) == 0 {
		if o.done {
			return 0, io.EOF
		}
		var l [4]byte
		if _, err := io.ReadFull(o.r, l[:]); err != nil {
			return 0, errors.New("sealed backup file cut short")
		}
		size := binary.BigEndian.Uint32(l[:])
		if size > sealChunk+uint32(o.aead.Overhead()) {
			return 0, errors.New("sealed backup file damaged: a chunk longer than any sealed")
		}
		sealed := make([]byte, size)
		if _, err := io.ReadFull(o.r, sealed); err != nil {
			return 0, errors.New("sealed backup file cut short")
		}
		// The last chunk opens with the last nonce only.
		plain, err := o.aead.Open(nil, chunkNonce(o.aead.NonceSize(), o.n, false), sealed, nil)
		if err != nil {
			plain, err = o.aead.Open(nil, chunkNonce(o.aead.NonceSize(), o.n, true), sealed, nil)
			if err != nil {
				return 0, fmt.Errorf("sealed backup file damaged at chunk %d: %w", o.n, err)
			}
			o.done = true
			if _, err := o.r.Peek(1); err != io.EOF {
				return 0, errors.New("sealed backup file damaged: data after its last chunk")
			}
		}
		o.n, o.plain = o.n+1, plain
	}
	k := copy(p, o.plain)
	o.plain = o.plain[k:]
	return k, nil
}

// CheckSealKey reports whether key opens the sealed backup in dir (m its
// manifest): ErrWrongKey if another key sealed it.
func CheckSealKey(dir string, m *Manifest, key string) error {
	for _, s := range m.Streams {
		f, err := os.Open(filepath.Join(dir, s.Name, dataFile))
		if err != nil {
			return err
		}
		_, err = NewOpenReader(f, key)
		f.Close()
		return err
	}
	return nil
}
