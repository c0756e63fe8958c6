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

// CheckStored compares spec with what a store already holds, read from
// the objects' meta.inf files under accountDir (the stream account's
// directory, <store_dir>/jetstream/<account>) without starting nats:
// every change Declare would refuse, each a *DriftError, joined. An
// object the store does not hold yet is fine (Declare creates it); a
// meta.inf that cannot be read is reported, since nats would not load it
// either. An encrypted object (a meta.key beside its meta.inf) is not
// read: Declare compares it once nats has opened it with the key. It is
// what `orderstore check` runs, so that check refuses what run refuses.
func CheckStored(accountDir string, spec Spec) error {
	var errs []error
	stream := func(want *jetstream.StreamConfig) {
		if want == nil {
			return
		}
		var have jetstream.StreamConfig
		ok, err := readMeta(filepath.Join(accountDir, "streams", want.Name, "meta.inf"), &have)
		switch {
		case err != nil:
			errs = append(errs, errorf("check", fmt.Sprintf("stream %q", want.Name), "", err))
		case ok:
			if d := streamDrift(have, *want); d != nil {
				errs = append(errs, d)
			}
		}
	}
	stream(&spec.Stream)
	stream(spec.DeadLetter)
	stream(spec.Aggregate)
	stream(spec.History)
	if c := spec.Consumer; c != nil {
		s := spec.ConsumerStream()
		var have jetstream.ConsumerConfig
		ok, err := readMeta(filepath.Join(accountDir, "streams", s, "obs", c.Durable, "meta.inf"), &have)
		switch {
		case err != nil:
			errs = append(errs, errorf("check", fmt.Sprintf("consumer %q on stream %q", c.Durable, s), "", err))
		case ok:
			if d := consumerDrift(s, have, *c); d != nil {
				errs = append(errs, d)
			}
		}
	}
	if b := spec.Projection; b != nil {
		obj := fmt.Sprintf("kv bucket %q", b.Bucket)
		var have jetstream.StreamConfig
		ok, err := readMeta(filepath.Join(accountDir, "streams", "KV_"+b.Bucket, "meta.inf"), &have)
		switch {
		case err != nil:
			errs = append(errs, errorf("check", obj, "", err))
		case ok && have.Storage != b.Storage:
			errs = append(errs, &DriftError{Object: obj, Changes: []Change{{obj, "storage", have.Storage.String(), b.Storage.String()}},
				hint: strings.Replace(bucketDriftHint, "jetstream/<account>/streams/KV_<bucket> under jetstream.store_dir",
					filepath.Join(accountDir, "streams", "KV_"+b.Bucket), 1)})
		}
	}
	return errors.Join(errs...)
}

// readMeta decodes a stream's or consumer's meta.inf (nats' JSON of its
// config); false when there is none.
func readMeta(path string, v any) (bool, error) {
	if _, err := os.Stat(filepath.Join(filepath.Dir(path), "meta.key")); err == nil {
		return false, nil // encrypted
	}
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
