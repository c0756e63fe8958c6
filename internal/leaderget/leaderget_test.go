package leaderget_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/leaderget"
)

// The last message on a subject, as the leader has it: none, a value, its
// delete marker; a stream that is not there is jetstream.ErrStreamNotFound.
func TestLastBySubject(t *testing.T) {
	js := embeddedtest.JetStream(t, embeddedtest.Start(t))
	ctx := context.Background()
	if _, _, _, err := leaderget.LastBySubject(ctx, js, "KV_NONE", "$KV.NONE.k"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("a bucket that is not there: %v, want ErrStreamNotFound", err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "B"})
	if err != nil {
		t.Fatal(err)
	}
	read := func() (string, uint64, bool) {
		t.Helper()
		data, seq, deleted, err := leaderget.LastBySubject(ctx, js, "KV_B", "$KV.B.k")
		if err != nil {
			t.Fatal(err)
		}
		return string(data), seq, deleted
	}
	if data, seq, deleted := read(); data != "" || seq != 0 || deleted {
		t.Fatalf("no key yet: %q at %d (deleted %v), want nothing at 0", data, seq, deleted)
	}
	kv.Put(ctx, "other", []byte("x"))
	rev, err := kv.Put(ctx, "k", []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	if data, seq, deleted := read(); data != "v1" || seq != rev || deleted {
		t.Fatalf("after a put at %d: %q at %d (deleted %v)", rev, data, seq, deleted)
	}
	if err := kv.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, seq, deleted := read(); !deleted || seq <= rev {
		t.Fatalf("after a delete: at %d, deleted %v; want the marker after %d", seq, deleted, rev)
	}
}
