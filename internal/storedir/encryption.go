package storedir

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
)

// EncryptionFile is a file in the store directory of an encrypted store:
// its cipher and a check of its key, so that a start with a wrong or no
// key is refused before nats reads (or moves aside) what it cannot decrypt.
const EncryptionFile = "encryption.json"

// Encryption is what EncryptionFile holds. KeyCheck is KeyCheck(key): it
// tells a key from another, and nothing about the key.
type Encryption struct {
	Cipher   string `json:"cipher"`
	KeyCheck string `json:"key_check"`
}

// KeyCheck is an HMAC-SHA256 of a fixed text under key, in hex.
func KeyCheck(key string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte("orderstore store encryption key check, v1"))
	return hex.EncodeToString(m.Sum(nil))
}

// Opens reports whether key is the store's.
func (e Encryption) Opens(key string) bool {
	return key != "" && hmac.Equal([]byte(e.KeyCheck), []byte(KeyCheck(key)))
}

// ReadEncryption reads EncryptionFile; ok is false when there is none (a plain or new store).
func (d Dir) ReadEncryption() (e Encryption, ok bool, err error) {
	path := filepath.Join(string(d), EncryptionFile)
	ok, err = readJSON(path, &e)
	if ok && (err != nil || e.KeyCheck == "") {
		return Encryption{}, false, fmt.Errorf("%q is damaged (%v): it says which key encrypts the store; "+
			"restore it from a backup of the store directory", path, err)
	}
	return e, ok, err
}

// WriteEncryption writes e durably.
func (d Dir) WriteEncryption(e Encryption) error {
	return writeJSON(filepath.Join(string(d), EncryptionFile), e)
}

// HasEncryptedStreams reports whether any stream of the store is encrypted
// (nats keeps a meta.key beside an encrypted stream's meta.inf).
func (d Dir) HasEncryptedStreams() bool {
	keys, _ := filepath.Glob(filepath.Join(d.JetStream(), "*", "streams", "*", "meta.key"))
	return len(keys) > 0
}
