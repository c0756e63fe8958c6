package orderindex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Run loads the bucket's records into the index, then follows every write
// until ctx is done. A record that is not an order's (no status, or not
// JSON) is skipped and counted; a key deleted or purged is forgotten. It
// returns ctx's end as nil, and an error if the watch fails: the index
// would then fall behind the projection silently.
func (x *Index) Run(ctx context.Context, kv jetstream.KeyValue, skipped func(key string, err error)) error {
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("order index: watch bucket %q: %w", kv.Bucket(), err)
	}
	defer w.Stop()
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
				x.markLoaded() // every record the bucket held is in
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
	switch e.Operation() {
	case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
		x.Remove(e.Key())
		return nil
	}
	var rec struct {
		Status      *string   `json:"status"`
		LastEventAt time.Time `json:"last_event_at"`
	}
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		x.Remove(e.Key())
		return err
	}
	if rec.Status == nil {
		x.Remove(e.Key())
		return errors.New("no status")
	}
	x.Put(strings.Clone(e.Key()), *rec.Status, rec.LastEventAt) // not the message's subject
	return nil
}
