// Modified by orderstore: this file differs from github.com/nats-io/nats-server/v2@v2.15.3
// (patches: 0026-inbox-match-cache.patch; see natsserver/README.md).

// Copyright 2026 The orderstore Authors
// Licensed under the Apache License, Version 2.0 (the "License");
// you may not use this file except in compliance with the License.
// You may obtain a copy of the License at
//
// http://www.apache.org/licenses/LICENSE-2.0
//
// Unless required by applicable law or agreed to in writing, software
// distributed under the License is distributed on an "AS IS" BASIS,
// WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
// See the License for the specific language governing permissions and
// limitations under the License.

package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A reply inbox's subject is matched as before (0026) but neither read
// from nor stored in the sublist's cache; other subjects still are.
func TestInboxMatchesNotCached(t *testing.T) {
	sl := NewSublistWithCache()
	mux := &subscription{subject: []byte("_INBOX.abc.*")}
	sl.Insert(mux)
	for _, s := range []string{"orders.>", "_INBOX.other.*", "$JS.API.>"} {
		sl.Insert(&subscription{subject: []byte(s)})
	}
	for round := 0; round < 2; round++ {
		for i := range 2000 {
			r := sl.Match(fmt.Sprintf("_INBOX.abc.%d", i))
			if len(r.psubs) != 1 || r.psubs[0] != mux {
				t.Fatalf("round %d: reply %d matched %d subscriptions, want the inbox's", round, i, len(r.psubs))
			}
		}
		if r := sl.Match("_INBOX.xyz.1"); len(r.psubs) != 0 {
			t.Fatalf("another inbox matched %d subscriptions", len(r.psubs))
		}
		if r := sl.Match("orders.created"); len(r.psubs) != 1 {
			t.Fatalf("orders.created matched %d subscriptions", len(r.psubs))
		}
	}
	if n := sl.CacheCount(); n != 1 {
		t.Errorf("%d subjects cached, want orders.created alone", n)
	}
}

// Through a real server: every publish gets its PubAck, and the account's
// sublist caches the stream's subject but none of the PubAcks' inboxes.
func TestPubAckInboxesNotCached(t *testing.T) {
	s, err := NewServer(&Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.AddStream(&nats.StreamConfig{Name: "S", Subjects: []string{"orders.>"}}); err != nil {
		t.Fatal(err)
	}
	const n = 1500
	for i := range n {
		ack, err := js.Publish("orders.created", []byte(fmt.Sprint(i)))
		if err != nil || ack.Sequence != uint64(i+1) {
			t.Fatalf("publish %d: %+v, %v", i, ack, err)
		}
	}
	futures := make([]nats.PubAckFuture, n)
	for i := range futures {
		if futures[i], err = js.PublishAsync("orders.created", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	for i, f := range futures {
		select {
		case ack := <-f.Ok():
			if ack.Sequence != uint64(n+i+1) {
				t.Fatalf("async publish %d acked as %d", i, ack.Sequence)
			}
		case err := <-f.Err():
			t.Fatalf("async publish %d: %v", i, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("async publish %d: no ack", i)
		}
	}
	acc := s.GlobalAccount()
	acc.sl.RLock()
	defer acc.sl.RUnlock()
	var subjects []string
	for subject := range acc.sl.cache {
		if strings.HasPrefix(subject, "_INBOX") {
			t.Fatalf("reply inbox %q cached", subject)
		}
		subjects = append(subjects, subject)
	}
	if !strings.Contains(strings.Join(subjects, " "), "orders.created") {
		t.Errorf("cached %q, want orders.created among them", subjects)
	}
}
