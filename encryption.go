package orderstore

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/orderstore/orderstore/internal/storedir"
)

// ErrEncryption is matched (errors.Is) when the encryption key does not fit
// the store: missing, wrong, or given for a store written without one.
var ErrEncryption = errors.New("store encryption")

// cipherName is the cipher c names ("" is the default).
func (j JetStreamConfig) cipherName() string { return cmp.Or(j.Cipher, CipherChaCha) }

// reencryptSteps is how a store gets another key or cipher: nats-server
// v2.15.3 cannot convert one in place (with prev_encryption_key or another
// cipher its state files and the consumer's fail to load).
const reencryptSteps = "stop orderstore, take an offline backup with the store's key and cipher in the config " +
	"(orderstore backup -offline -config FILE DIR: sealed with that key), move jetstream.store_dir away, then restore the " +
	"backup with the new settings and the old key (orderstore restore -config FILE -backup-key-file OLD_KEY_FILE DIR), and start"

// storeKey says whether j's key opens the store in dir, reading only: a refusal changes nothing.
// write is set for a new encrypted store, whose key check is written before nats creates anything.
func storeKey(dir string, j JetStreamConfig) (write bool, err error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return false, err
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		// A new store (or no directory: preflight says what is wrong).
		return j.EncryptionKey != "", nil
	}
	d := storedir.Dir(abs)
	e, encrypted, err := d.ReadEncryption()
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrEncryption, err)
	}
	streams := d.HasStreams(StreamAccount) || d.HasStreams(legacyAccount)
	switch {
	case !encrypted && streams && d.HasEncryptedStreams():
		return false, WithHint(fmt.Errorf("%w: store %q holds encrypted streams, but its key check %s is missing",
			ErrEncryption, abs, storedir.EncryptionFile),
			"put back "+storedir.EncryptionFile+" from a copy of the store directory; orderstore does not start an encrypted store whose key it cannot check")
	case !encrypted && j.EncryptionKey == "":
		return false, nil
	case !encrypted && streams:
		return false, WithHint(fmt.Errorf("%w: store %q holds streams written without encryption, and orderstore does not encrypt a store in place",
			ErrEncryption, abs),
			"to keep it plain, leave jetstream.encryption_key_file out; to encrypt it: stop orderstore, take an offline backup "+
				"with the config naming no key (orderstore backup -offline -config FILE DIR), move jetstream.store_dir away, then "+
				"restore the backup with the key set (orderstore restore -config FILE DIR), and start: the restore writes every event encrypted")
	case !encrypted:
		return true, nil
	case j.EncryptionKey == "":
		return false, WithHint(fmt.Errorf("%w: store %q is encrypted (%s): nothing in it can be read without its key",
			ErrEncryption, abs, e.Cipher),
			"set jetstream.encryption_key_file to the key it was encrypted with (or give it as the systemd credential "+
				CredentialName+"); to turn encryption off: "+reencryptSteps+", the config naming no key, and -decrypt")
	case e.Opens(j.EncryptionKey) && e.Cipher == j.cipherName():
		return false, nil
	case e.Opens(j.EncryptionKey):
		return false, WithHint(fmt.Errorf("%w: store %q is encrypted with %s, and jetstream.cipher is %s: orderstore does not convert a store in place",
			ErrEncryption, abs, e.Cipher, j.cipherName()),
			"set jetstream.cipher = \""+e.Cipher+"\"; to change the cipher: "+reencryptSteps)
	default:
		return false, WithHint(fmt.Errorf("%w: the key given (jetstream.encryption_key_file, else the systemd credential %s) does not open store %q: it was encrypted with another key",
			ErrEncryption, CredentialName, abs),
			"give the key it was encrypted with; to change the key: "+reencryptSteps)
	}
}

// CredentialName is the systemd credential the key may come from
// ($CREDENTIALS_DIRECTORY/orderstore-encryption-key), when the config names no key file.
const CredentialName = "orderstore-encryption-key"

// cipherOf is the cipher the store is encrypted with, "" when plain.
func cipherOf(j JetStreamConfig) string {
	if j.EncryptionKey == "" {
		return ""
	}
	return j.cipherName()
}
