// Package setup maps the file configuration onto each package's own
// Config, in one place (the appliance and the test helper share it, so a
// test broker declares ORDER_EVENTS exactly as the appliance does).
package setup

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/bootstrap"
	"github.com/orderstore/orderstore/embedded"
	"github.com/orderstore/orderstore/internal/config"
	"github.com/orderstore/orderstore/processor"
)

// InternalUser is the user orderstore's own in-process connection uses when
// [[server.users]] are configured (auth then applies in-process too).
const InternalUser = "orderstore-internal"

// Embedded returns the embedded server config for cfg. When cfg has client
// users it adds InternalUser with a fresh random password and returns it.
func Embedded(cfg config.Config, logger *slog.Logger) (ec embedded.Config, internalPassword string) {
	ec = embedded.Config{
		StoreDir:       cfg.JetStream.StoreDir,
		Host:           cfg.Server.Host,
		Port:           cfg.Server.Port,
		ServerName:     cfg.Server.Name,
		MaxPayload:     int32(cfg.Server.MaxPayload),
		MaxMemory:      int64(cfg.JetStream.MaxMemoryStore),
		MaxStore:       int64(cfg.JetStream.MaxFileStore),
		SyncInterval:   cfg.JetStream.SyncEvery(),
		Logger:         logger,
		Debug:          cfg.Log.Level == "debug",
		SystemUser:     cfg.Server.SystemUser,
		SystemPassword: cfg.Server.SystemPassword,
	}
	for _, u := range cfg.Server.Users {
		ec.Users = append(ec.Users, embedded.User{Name: u.User, Password: u.Password, Publish: u.Publish, Subscribe: u.Subscribe})
	}
	if len(ec.Users) > 0 {
		var b [24]byte
		_, _ = rand.Read(b[:])
		internalPassword = hex.EncodeToString(b[:])
		ec.Users = append(ec.Users, embedded.User{Name: InternalUser, Password: internalPassword})
	}
	return ec, internalPassword
}

// Preflight returns the preflight checks for cfg.
func Preflight(cfg config.Config) bootstrap.PreflightConfig {
	return bootstrap.PreflightConfig{
		StoreDir:     cfg.JetStream.StoreDir,
		MaxFileStore: int64(cfg.JetStream.MaxFileStore),
		Headroom:     int64(cfg.JetStream.DiskHeadroom),
		AllowLowDisk: cfg.JetStream.AllowLowDisk,
	}
}

// Spec returns what the appliance declares for cfg.
func Spec(cfg config.Config) bootstrap.Spec {
	st := cfg.Stream
	discard := jetstream.DiscardOld
	if st.Discard == "new" {
		discard = jetstream.DiscardNew
	}
	spec := bootstrap.Spec{
		Stream: jetstream.StreamConfig{
			Name:        st.Name,
			Description: "order events (managed by orderstore)",
			Subjects:    st.Subjects,
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			MaxAge:      st.MaxAge.D(),
			MaxBytes:    int64(st.MaxBytes),
			MaxMsgs:     st.MaxMsgs,
			MaxMsgSize:  int32(st.MaxMsgSize),
			Discard:     discard,
			Duplicates:  st.DuplicateWindow.D(),
			Replicas:    st.Replicas,
			AllowDirect: true,
		},
	}
	p := cfg.Processor
	spec.DeadLetter = &jetstream.StreamConfig{
		Name:        p.DeadLetterStream,
		Description: "dead-lettered order events (managed by orderstore)",
		Subjects:    []string{DeadLetterSubjectPrefix(p.DeadLetterStream) + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		MaxAge:      p.DeadLetterMaxAge.D(),
		MaxMsgSize:  int32(cfg.Server.MaxPayload),
		Discard:     jetstream.DiscardOld,
		Replicas:    st.Replicas,
		AllowDirect: true,
	}
	spec.Projection = &jetstream.KeyValueConfig{
		Bucket:      p.ProjectionBucket,
		Description: "order projection (managed by orderstore)",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    st.Replicas,
	}
	if p.Enabled {
		spec.Consumer = &jetstream.ConsumerConfig{
			Durable:       p.Durable,
			Description:   "orderstore built-in processor",
			DeliverPolicy: jetstream.DeliverAllPolicy,
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       p.AckWait.D(),
			// The processor enforces max_deliver itself and dead-letters
			// the event; the server's own limit stays off, because when
			// nats-server reaches it, it drops the event silently (an
			// advisory nobody may hear): a processor that crashed or timed
			// out on the last delivery would lose an order for good.
			MaxDeliver:    -1,
			Metadata:      map[string]string{"orderstore_max_deliver": strconv.Itoa(p.MaxDeliver)},
			MaxAckPending: p.MaxAckPending,
			ReplayPolicy:  jetstream.ReplayInstantPolicy,
		}
	}
	return spec
}

// DeadLetterSubjectPrefix is the subject prefix of the dead-letter stream:
// a dead letter of orders.created is stored on "<prefix>.orders.created".
func DeadLetterSubjectPrefix(stream string) string { return "dlq." + stream }

// Backoff converts the configured retry delays.
func Backoff(cfg config.Config) []time.Duration {
	out := make([]time.Duration, len(cfg.Processor.Backoff))
	for i, d := range cfg.Processor.Backoff {
		out[i] = d.D()
	}
	return out
}

// ProcessorConfig returns the built-in processor's config for cfg, without
// its Handler and Logger.
func ProcessorConfig(cfg config.Config) processor.Config {
	return processor.Config{
		Stream:                  cfg.Stream.Name,
		Durable:                 cfg.Processor.Durable,
		DeadLetterStream:        cfg.Processor.DeadLetterStream,
		DeadLetterSubjectPrefix: DeadLetterSubjectPrefix(cfg.Processor.DeadLetterStream),
		MaxDeliver:              cfg.Processor.MaxDeliver,
		Backoff:                 Backoff(cfg),
	}
}

// Projection returns the built-in projection over cfg's bucket. Atomic batch
// commits are on only under sync_interval "always", where they save an fsync
// per order; with a relaxed interval, pipelined single writes are faster.
func Projection(ctx context.Context, js jetstream.JetStream, cfg config.Config) (*processor.Projection, error) {
	kv, err := js.KeyValue(ctx, cfg.Processor.ProjectionBucket)
	if err != nil {
		return nil, fmt.Errorf("projection bucket %q: %w", cfg.Processor.ProjectionBucket, err)
	}
	proj := processor.NewProjection(js, kv)
	proj.SetAtomicBatches(cfg.JetStream.SyncInterval.Always)
	return proj, nil
}
