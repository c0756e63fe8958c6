package bootstrap

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// CheckStored compares spec with what a store already holds, read from the objects' meta.inf files
// under accountDir (the stream account's directory, <store_dir>/jetstream/<account>) without
// starting nats: every change Declare would refuse, each a *DriftError, joined. An object the store
// does not hold yet is fine (Declare creates it); a meta.inf that cannot be read is reported, since
// nats would not load it either. An encrypted object (a meta.key beside its meta.inf) is not read:
// Declare compares it once nats has opened it with the key. It is what `orderstore check` runs, so
// that check refuses what run refuses.
func CheckStored(accountDir string, spec Spec) error {
	var errs []error
	streams := filepath.Join(accountDir, "streams")
	for _, want := range []*jetstream.StreamConfig{&spec.Stream, spec.DeadLetter, spec.Aggregate, spec.History} {
		if want != nil {
			checkMeta(&errs, filepath.Join(streams, want.Name), streamObj(want.Name),
				func(have jetstream.StreamConfig) *DriftError { return streamDrift(have, *want) })
		}
	}
	if c := spec.Consumer; c != nil {
		s := spec.ConsumerStream()
		checkMeta(&errs, filepath.Join(streams, s, "obs", c.Durable), consumerObj(c.Durable, s),
			func(have jetstream.ConsumerConfig) *DriftError { return consumerDrift(s, have, *c) })
	}
	if b := spec.Projection; b != nil {
		dir, obj := filepath.Join(streams, "KV_"+b.Bucket), fmt.Sprintf("kv bucket %q", b.Bucket)
		checkMeta(&errs, dir, obj, func(have jetstream.StreamConfig) *DriftError {
			return bucketDrift(obj, have.Storage, b.Storage,
				strings.Replace(bucketDriftHint, "jetstream/<account>/streams/KV_<bucket> under jetstream.store_dir", dir, 1))
		})
	}
	return errors.Join(errs...)
}

// checkMeta adds to errs what drift finds in the config of obj, read from the meta.inf in dir, or
// why it cannot be read; nothing when the store does not hold obj or it is encrypted.
func checkMeta[T any](errs *[]error, dir, obj string, drift func(have T) *DriftError) {
	var have T
	ok, err := readMeta(dir, &have)
	switch {
	case err != nil:
		*errs = append(*errs, errorf("check", obj, "", err))
	case ok:
		if d := drift(have); d != nil {
			*errs = append(*errs, d)
		}
	}
}

// readMeta decodes a stream's or consumer's meta.inf (nats' JSON of its config); false if none.
func readMeta(dir string, v any) (bool, error) {
	if _, err := os.Stat(filepath.Join(dir, "meta.key")); err == nil {
		return false, nil // encrypted
	}
	path := filepath.Join(dir, "meta.inf")
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	return true, nil
}
