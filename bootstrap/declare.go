package bootstrap

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/internal/bytesize"
)

// Spec is everything orderstore declares at start-up.
type Spec struct {
	// Stream is ORDER_EVENTS (or its configured name).
	Stream jetstream.StreamConfig
	// Consumer is the built-in processor's durable consumer; nil declares none.
	Consumer *jetstream.ConsumerConfig
	// DeadLetter is the dead-letter stream; nil declares none.
	DeadLetter *jetstream.StreamConfig
	// Projection is the projection KV bucket; nil declares none.
	Projection *jetstream.KeyValueConfig
	// History is the stream of the projection's history index, read as a KV bucket ("KV_<bucket>");
	// a stream, not a KeyValueConfig, because it discards its oldest chunks when full (a bucket
	// refuses new writes). nil declares none.
	History *jetstream.StreamConfig
	// Aggregate is a hub's stream that sources Stream and the edges'
	// streams; nil declares none. When set, Consumer lives on it.
	Aggregate *jetstream.StreamConfig
}

// ConsumerStream is the stream the durable consumer reads: Aggregate's if any, else Stream's.
func (s Spec) ConsumerStream() string {
	if s.Aggregate != nil {
		return s.Aggregate.Name
	}
	return s.Stream.Name
}

// Streams returns the spec's stream names, the projection's ("KV_<bucket>") included, in the order
// a backup snapshots them: the projection and its history index first, the stream after them.
func (s Spec) Streams() []string {
	var names []string
	if s.Projection != nil {
		names = append(names, "KV_"+s.Projection.Bucket)
	}
	// History after the projection: a chunk a record counts is in the backup.
	for _, c := range []*jetstream.StreamConfig{s.History, s.DeadLetter, &s.Stream, s.Aggregate} {
		if c != nil {
			names = append(names, c.Name)
		}
	}
	return names
}

// Change is one field that Declare changed on an existing object.
type Change struct {
	Object string // `stream "ORDER_EVENTS"`
	Field  string // config key, e.g. "max_bytes"
	Before string
	After  string
}

func (c Change) String() string {
	return fmt.Sprintf("%s %s: %s -> %s", c.Object, c.Field, c.Before, c.After)
}

// Result says what Declare did.
type Result struct {
	Created []string // objects created, e.g. `stream "ORDER_EVENTS"`
	Changes []Change // safe changes applied to existing objects
}

// DriftError is a difference between the declared and the stored configuration that Declare
// refuses: it would lose data or change semantics (storage type, retention, subjects removed, ...).
type DriftError struct {
	Object  string
	Changes []Change
	hint    string
}

func (e *DriftError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "declare %s: refusing a destructive change to the stored configuration:", e.Object)
	for _, c := range e.Changes {
		fmt.Fprintf(&b, "\n  %s: stored %s, config wants %s", c.Field, c.Before, c.After)
	}
	return b.String()
}

// Hint says what to do.
func (e *DriftError) Hint() string { return e.hint }

// Declare creates or updates, idempotently, the history index, the stream, the dead-letter stream,
// the projection bucket, a hub's aggregate stream and the durable consumer of spec. Safe
// differences (limits, max_deliver, ack_wait, added subjects) are applied and logged as
// before/after; a destructive one returns a *DriftError and leaves its object as it is.
func Declare(ctx context.Context, js jetstream.JetStream, spec Spec, logger *slog.Logger) (*Result, error) {
	logger = cmp.Or(logger, slog.New(slog.DiscardHandler))
	res := &Result{}
	for _, step := range []func() error{
		func() error { return declareStream(ctx, js, spec.History, res) },
		func() error { return declareStream(ctx, js, &spec.Stream, res) },
		func() error { return declareStream(ctx, js, spec.DeadLetter, res) },
		func() error { return declareBucket(ctx, js, spec.Projection, res) },
		func() error { return declareStream(ctx, js, spec.Aggregate, res) },
		func() error { return declareConsumer(ctx, js, spec.ConsumerStream(), spec.Consumer, res) },
	} {
		if err := step(); err != nil {
			return res, err
		}
	}
	for _, o := range res.Created {
		logger.Info("declared", "object", o)
	}
	for _, c := range res.Changes {
		logger.Info("config change applied", "object", c.Object, "key", c.Field, "before", c.Before, "after", c.After)
	}
	return res, nil
}

func declareStream(ctx context.Context, js jetstream.JetStream, w *jetstream.StreamConfig, res *Result) error {
	if w == nil {
		return nil
	}
	want := *w
	obj := streamObj(want.Name)
	s, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, cerr := js.CreateStream(ctx, want)
		switch {
		case cerr == nil:
			res.Created = append(res.Created, obj)
			return nil
		case errors.Is(cerr, jetstream.ErrStreamNameAlreadyInUse):
			// Another node of a cluster created it a moment ago: compare with the one there.
			s, err = js.Stream(ctx, want.Name)
		default:
			return errorf("declare", obj, streamHint(cerr), cerr)
		}
	}
	if err != nil {
		return errorf("declare", obj, "", err)
	}
	have := s.CachedInfo().Config
	state := s.CachedInfo().State
	if d := streamDrift(have, want); d != nil {
		return d
	}
	safe := diff{obj: obj}
	safe.add("subjects", fmt.Sprintf("%q", have.Subjects), fmt.Sprintf("%q", want.Subjects))
	safe.add("max_age", durStr(have.MaxAge), durStr(want.MaxAge))
	// A limit of 0 is declared as unlimited, -1.
	safe.size("max_bytes", have.MaxBytes, cmp.Or(want.MaxBytes, -1))
	safe.add("max_msgs", limitStr(have.MaxMsgs), limitStr(cmp.Or(want.MaxMsgs, -1)))
	safe.size("max_msg_size", int64(have.MaxMsgSize), int64(cmp.Or(want.MaxMsgSize, -1)))
	safe.add("discard", have.Discard, want.Discard)
	if want.Duplicates != 0 {
		safe.add("duplicate_window", durStr(have.Duplicates), durStr(want.Duplicates))
	}
	safe.add("sources", sourcesStr(have.Sources), sourcesStr(want.Sources))
	if len(safe.changes) == 0 {
		return nil
	}
	// Keep what the server owns and we do not declare.
	want.Duplicates = cmp.Or(want.Duplicates, have.Duplicates)
	if _, err := js.UpdateStream(ctx, want); err != nil {
		return errorf("declare", obj, streamHint(err), err)
	}
	for _, c := range safe.changes {
		if c.Field == "max_bytes" && want.MaxBytes > 0 && int64(state.Bytes) > want.MaxBytes {
			c.After += fmt.Sprintf(" (below the %s stored: the oldest events were discarded)", bytesize.Format(int64(state.Bytes)))
		}
		if c.Field == "max_msgs" && want.MaxMsgs > 0 && int64(state.Msgs) > want.MaxMsgs {
			c.After += fmt.Sprintf(" (below the %d stored: the oldest events were discarded)", state.Msgs)
		}
		res.Changes = append(res.Changes, c)
	}
	return nil
}

// streamDrift is what orderstore refuses to change in a stored stream
// (have) to make it want: a change that would lose or strand its events.
func streamDrift(have, want jetstream.StreamConfig) *DriftError {
	bad := diff{obj: streamObj(want.Name)}
	bad.add("storage", have.Storage, want.Storage)
	bad.add("retention", have.Retention, want.Retention)
	removed := slices.DeleteFunc(slices.Clone(have.Subjects), func(subj string) bool { return slices.Contains(want.Subjects, subj) })
	if len(removed) > 0 {
		bad.add("subjects", fmt.Sprintf("%q", have.Subjects), fmt.Sprintf("%q (removes %q: stored events on them would no longer match)", want.Subjects, removed))
	}
	if want.Replicas != 0 {
		bad.add("replicas", have.Replicas, want.Replicas)
	}
	return bad.drift(streamDriftHint)
}

// diff collects the changes of obj's fields.
type diff struct {
	obj     string
	changes []Change
}

// add notes field's change when before and after print differently.
func (d *diff) add(field string, before, after any) {
	if b, a := fmt.Sprint(before), fmt.Sprint(after); b != a {
		d.changes = append(d.changes, Change{d.obj, field, b, a})
	}
}

// size notes a byte limit's change: compared as numbers, printed for
// people, exactly where the rounded figures would print alike.
func (d *diff) size(field string, before, after int64) {
	b, a := bytesize.Format(before), bytesize.Format(after)
	if b == a {
		b, a = bytesize.Exact(before), bytesize.Exact(after)
	}
	if before != after {
		d.changes = append(d.changes, Change{d.obj, field, b, a})
	}
}

// drift is the changes as a *DriftError with hint; nil when there are none.
func (d *diff) drift(hint string) *DriftError {
	if len(d.changes) == 0 {
		return nil
	}
	return &DriftError{Object: d.obj, Changes: d.changes, hint: hint}
}

// bucketDrift is a projection bucket's storage changed (obj names it).
func bucketDrift(obj string, have, want jetstream.StorageType, hint string) *DriftError {
	bad := diff{obj: obj}
	bad.add("storage", have, want)
	return bad.drift(hint)
}

func streamObj(name string) string { return fmt.Sprintf("stream %q", name) }

func consumerObj(durable, stream string) string {
	return fmt.Sprintf("consumer %q on stream %q", durable, stream)
}

// streamDriftHint is the remedy for a destructive change of the stream:
// a new stream, the old events kept in a backup.
const streamDriftHint = "to keep the stored events, set the keys back to the stored values and start again; " +
	"to change them, the stream must begin anew: with orderstore stopped and the stored values in the config, " +
	"take a backup if you need the events (orderstore backup -offline DIR), move jetstream.store_dir away, " +
	"and start with the new values"

// bucketDriftHint is the remedy for a change of the projection bucket's
// storage: a new bucket, filled again from the stream.
const bucketDriftHint = "the bucket was made with a storage other than orderstore's (file): " +
	"stop orderstore, move the bucket's directory (jetstream/<account>/streams/KV_<bucket> " +
	"under jetstream.store_dir) away and start it: the new bucket is filled from the stream"

// bucketRoomHint is the remedy for a new projection bucket that does not fit.
const bucketRoomHint = "processor.projection_max_bytes does not fit in jetstream.max_file_store next to what the store holds " +
	"(a renamed processor.projection_bucket leaves the old bucket in place): raise max_file_store, or lower projection_max_bytes"

// consumerDrift is what orderstore refuses to change in a stored consumer
// (have) on stream: one that is not the processor's kind of consumer.
func consumerDrift(stream string, have, want jetstream.ConsumerConfig) *DriftError {
	bad := diff{obj: consumerObj(want.Durable, stream)}
	bad.add("ack_policy", have.AckPolicy, want.AckPolicy)
	bad.add("deliver_policy", have.DeliverPolicy, want.DeliverPolicy)
	if have.DeliverSubject != "" {
		bad.add("type", "push consumer (deliver subject "+have.DeliverSubject+")", "pull consumer")
	}
	if have.Durable == "" {
		bad.add("durable", "ephemeral", "durable")
	}
	return bad.drift(fmt.Sprintf(
		"something other than orderstore created a consumer named %q (an ad-hoc CLI consumer?); remove it with `nats consumer rm %s %s` and restart: the processor resumes from the stream and its projection skips what it already applied",
		want.Durable, stream, want.Durable))
}

func declareBucket(ctx context.Context, js jetstream.JetStream, w *jetstream.KeyValueConfig, res *Result) error {
	if w == nil {
		return nil
	}
	want := *w
	obj := fmt.Sprintf("kv bucket %q", want.Bucket)
	kv, err := js.KeyValue(ctx, want.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		_, cerr := js.CreateKeyValue(ctx, want)
		switch {
		case cerr == nil:
			res.Created = append(res.Created, obj)
			return allowAtomic(ctx, js, want.Bucket, obj, nil)
		case errors.Is(cerr, jetstream.ErrBucketExists):
			// Another node of a cluster created it (and allowed atomic
			// batches) a moment ago: declare the one that is there.
			kv, err = js.KeyValue(ctx, want.Bucket)
		default:
			if api := (*jetstream.APIError)(nil); errors.As(cerr, &api) && api.ErrorCode == 10047 { // insufficient resources
				return errorf("declare", obj, bucketRoomHint, cerr)
			}
			return errorf("declare", obj, "", cerr)
		}
	}
	if err != nil {
		return errorf("declare", obj, "", err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return errorf("declare", obj, "", err)
	}
	if st.BackingStore() != "JetStream" {
		return errorf("declare", obj, "", fmt.Errorf("unexpected backing store %q", st.BackingStore()))
	}
	if ks, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		have := ks.StreamInfo().Config
		if d := bucketDrift(obj, have.Storage, want.Storage, bucketDriftHint); d != nil {
			return d
		}
		// Limits are safe changes, applied to the bucket's stream.
		cfg := have
		cfg.MaxBytes, cfg.MaxAge = cmp.Or(want.MaxBytes, -1), want.TTL
		if cfg.MaxAge > 0 && cfg.Duplicates > cfg.MaxAge {
			cfg.Duplicates = cfg.MaxAge
		}
		safe := diff{obj: obj}
		safe.size("max_bytes", have.MaxBytes, cfg.MaxBytes)
		safe.add("ttl", durStr(have.MaxAge), durStr(cfg.MaxAge))
		// A bucket declared before orderstore asked for markers of expired keys gets them (nats
		// cannot take them back: a marker TTL asked off later stays on).
		if want.LimitMarkerTTL > 0 && have.SubjectDeleteMarkerTTL != want.LimitMarkerTTL {
			cfg.AllowMsgTTL, cfg.SubjectDeleteMarkerTTL = true, want.LimitMarkerTTL
			before := "none"
			if have.SubjectDeleteMarkerTTL > 0 {
				before = durStr(have.SubjectDeleteMarkerTTL)
			}
			safe.add("limit_marker_ttl", before, durStr(want.LimitMarkerTTL))
		}
		if len(safe.changes) > 0 {
			if _, err := js.UpdateStream(ctx, cfg); err != nil {
				return errorf("declare", obj, "", err)
			}
			res.Changes = append(res.Changes, safe.changes...)
		}
	}
	return allowAtomic(ctx, js, want.Bucket, obj, res)
}

// allowAtomic lets the bucket's stream take atomic batch publishes: the
// processor commits a batch of projection writes as one, which under
// sync_interval "always" costs one fsync instead of one per order.
func allowAtomic(ctx context.Context, js jetstream.JetStream, bucket, obj string, res *Result) error {
	s, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return errorf("declare", obj, "", err)
	}
	cfg := s.CachedInfo().Config
	if cfg.AllowAtomicPublish {
		return nil
	}
	cfg.AllowAtomicPublish = true
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return errorf("declare", obj, "", fmt.Errorf("allow atomic batch publish: %w", err))
	}
	if res != nil {
		res.Changes = append(res.Changes, Change{obj, "allow_atomic_publish", "false", "true"})
	}
	return nil
}

func declareConsumer(ctx context.Context, js jetstream.JetStream, stream string, w *jetstream.ConsumerConfig, res *Result) error {
	if w == nil {
		return nil
	}
	want := *w
	obj := consumerObj(want.Durable, stream)
	c, err := js.Consumer(ctx, stream, want.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		if _, err := js.CreateConsumer(ctx, stream, want); err != nil {
			return errorf("declare", obj, "", err)
		}
		res.Created = append(res.Created, obj)
		return nil
	}
	if err != nil {
		return errorf("declare", obj, "", err)
	}
	have := c.CachedInfo().Config
	if d := consumerDrift(stream, have, want); d != nil {
		return d
	}
	safe := diff{obj: obj}
	safe.add("ack_wait", durStr(have.AckWait), durStr(want.AckWait))
	// processor.max_deliver is in the metadata: the processor enforces it.
	// A stored consumer without it (or with another value) is updated.
	safe.add("max_deliver", metadataStr(have.Metadata, MetadataMaxDeliver), metadataStr(want.Metadata, MetadataMaxDeliver))
	// The consumer's own limit (orderstore declares -1), not a config key.
	safe.add("consumer_max_deliver", have.MaxDeliver, want.MaxDeliver)
	safe.add("max_ack_pending", have.MaxAckPending, want.MaxAckPending)
	safe.add("filter_subject", have.FilterSubject, want.FilterSubject)
	safe.add("backoff", have.BackOff, want.BackOff)
	if len(safe.changes) == 0 {
		return nil
	}
	// A pause stays: a cluster's projection rebuild pauses the durable
	// for every node during its takeover, and only its end resumes it.
	want.PauseUntil = have.PauseUntil
	if _, err := js.UpdateConsumer(ctx, stream, want); err != nil {
		return errorf("declare", obj, "", err)
	}
	res.Changes = append(res.Changes, safe.changes...)
	return nil
}

// MetadataMaxDeliver is the consumer metadata key that holds processor.max_deliver: the processor
// enforces it, not the server (see orderstore.Config.DeclareSpec).
const MetadataMaxDeliver = "orderstore_max_deliver"

// metadataStr is md[key], or "unset" when md has no such key.
func metadataStr(md map[string]string, key string) string {
	if v, ok := md[key]; ok {
		return v
	}
	return "unset"
}

func streamHint(err error) string {
	if api := (*jetstream.APIError)(nil); errors.As(err, &api) {
		switch api.ErrorCode {
		case jetstream.JSErrCodeStreamNameInUse:
			return "a stream with another configuration already uses this name"
		case 10065: // subjects overlap
			return "another stream already captures these subjects; remove it or change stream.subjects"
		case 10047: // insufficient resources
			return "stream.max_bytes does not fit in jetstream.max_file_store next to the other streams (dead letters, projection, history index): raise max_file_store or lower max_bytes"
		}
	}
	return ""
}

func durStr(d time.Duration) string {
	if d == 0 {
		return "unlimited"
	}
	return d.String()
}

func limitStr(n int64) string {
	if n < 0 {
		return "unlimited"
	}
	return fmt.Sprint(n)
}

// sourcesStr lists a stream's sources as "NAME@domain" (or NAME), each
// with its deliver prefix and subject transforms: what a source takes, and where.
func sourcesStr(l []*jetstream.StreamSource) string {
	var out []string
	for _, s := range l {
		n := s.Name
		if s.Domain != "" {
			n += "@" + s.Domain
		} else if s.External != nil && s.External.APIPrefix != "" {
			// nats stores a source's domain d as the API prefix
			// "$JS.d.API": the same source, spelled as declared.
			p := s.External.APIPrefix
			if d := strings.TrimSuffix(strings.TrimPrefix(p, "$JS."), ".API"); d != "" && "$JS."+d+".API" == p {
				p = d
			}
			n += "@" + p
			if s.External.DeliverPrefix != "" {
				n += " delivered on " + s.External.DeliverPrefix
			}
		}
		for _, tr := range s.SubjectTransforms {
			n += " " + tr.Source + " as " + tr.Destination
		}
		out = append(out, n)
	}
	return fmt.Sprintf("%q", out)
}
