package orderindex

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/nats-io/nats.go/jetstream"
)

// Run loads the bucket's records into the index, then follows every write until ctx is done (nil).
// A record that is not an order's (no status, not JSON) is skipped and reported, one of withheld
// events only (status "") skipped; a key deleted or purged is forgotten. A failed watch is an
// error: the index would fall behind silently.
func (x *Index) Run(ctx context.Context, kv jetstream.KeyValue, skipped func(key string, err error)) error {
	st, err := kv.Status(ctx) // loaded, the index reflects the bucket up to its last sequence now
	if err != nil {
		return fmt.Errorf("order index: bucket %q: %w", kv.Bucket(), err)
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("order index: watch bucket %q: %w", kv.Bucket(), err)
	}
	defer StopWatch(w)
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("order index: the watch of bucket %q ended", kv.Bucket())
			}
			if e == nil {
				if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok { // its last write may be gone unread (expired)
					x.applied.Store(max(x.applied.Load(), bs.StreamInfo().State.LastSeq))
				}
				x.loadOnce.Do(func() { close(x.loaded) }) // every record the bucket held is in
				continue
			}
			if err := x.apply(e); err != nil && skipped != nil {
				skipped(e.Key(), err)
			}
		}
	}
}

// apply records one write of the bucket.
func (x *Index) apply(e jetstream.KeyValueEntry) error {
	defer x.applied.Store(e.Revision()) // once the index holds it
	switch e.Operation() {
	case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
		x.Remove(e.Key())
		return nil
	}
	status, at, err := indexFields(e.Value())
	if err == nil && status == nil {
		err = errors.New("no status")
	}
	if err != nil || *status == "" { // "": dead-lettered events only, no order yet (not found by Get)
		x.Remove(e.Key())
		return err
	}
	x.Put(strings.Clone(e.Key()), *status, at) // not the message's subject
	return nil
}

// indexFields reads a record's "status" and "last_event_at" as encoding/json would into a *string
// and a time.Time, and stops once it has both: the processor writes them ahead of its bookkeeping
// lists (applied, history: hundreds of sequences for a long-lived order), which the index never
// needs, so indexing a write costs the same for every order. The rest is not read, nor checked.
func indexFields(b []byte) (status *string, at time.Time, err error) {
	d := jsontext.NewDecoder(bytes.NewReader(b), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	if tok, err := d.ReadToken(); err != nil {
		return nil, at, err
	} else if tok.Kind() != '{' {
		return nil, at, fmt.Errorf("a record is a JSON object, not %v", tok.Kind())
	}
	var haveAt bool
	for (status == nil || !haveAt) && d.PeekKind() != '}' {
		tok, err := d.ReadToken()
		if err != nil {
			return nil, at, err
		}
		name := tok.String() // before the next read voids tok
		v, err := d.ReadValue()
		if err != nil {
			return nil, at, err
		}
		switch name {
		case "status":
			status = nil
			err = json.Unmarshal(v, &status)
		case "last_event_at":
			err, haveAt = json.Unmarshal(v, &at), true
		}
		if err != nil {
			return nil, at, err
		}
	}
	return status, at, nil
}

// StopWatch stops w. A delivery under way may wait on a full Updates (a few sends at most, of its
// 256 slots): Updates is emptied once, not drained till closed, which nats.go skips if the
// subscription ended before Watch set its closed handler (a Close right after the start then hung).
func StopWatch(w jetstream.KeyWatcher) {
	_ = w.Stop()
	for {
		select {
		case _, ok := <-w.Updates():
			if ok {
				continue
			}
		default:
		}
		return
	}
}
