// Modified by orderstore: this file differs from github.com/nats-io/nats-server/v2@v2.15.3
// (patches: 0015-ack-match-cache.patch; see natsserver/README.md).

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

// ackSublist is an account's sublist as a consumer's leader holds it:
// the consumer's ack subscription beside other subscriptions.
func ackSublist() (*Sublist, *subscription) {
	sl := NewSublistWithCache()
	ack := &subscription{subject: []byte("$JS.ACK.S.c.>")}
	sl.Insert(ack)
	for _, s := range []string{"orders.>", "$KV.projection.>", "_INBOX.abc.*", "$JS.API.>", "$JS.ACK.S.other.>"} {
		sl.Insert(&subscription{subject: []byte(s)})
	}
	return sl, ack
}

// An ack's subject is matched as before (0015) but neither read from nor
// stored in the sublist's cache; other subjects still are.
func TestAckMatchesNotCached(t *testing.T) {
	sl, ack := ackSublist()
	for round := 0; round < 2; round++ {
		for i := range 2000 {
			r := sl.Match(fmt.Sprintf("$JS.ACK.S.c.1.%d.%d.1700000000000000000.0", i, i))
			if len(r.psubs) != 1 || r.psubs[0] != ack {
				t.Fatalf("round %d: ack %d matched %d subscriptions, want the consumer's", round, i, len(r.psubs))
			}
		}
		if r := sl.Match("$JS.ACK.S.x.1.1.1.1.0"); len(r.psubs) != 0 {
			t.Fatalf("an ack of another consumer matched %d subscriptions", len(r.psubs))
		}
		if r := sl.Match("orders.created"); len(r.psubs) != 1 {
			t.Fatalf("orders.created matched %d subscriptions", len(r.psubs))
		}
	}
	if n := sl.CacheCount(); n != 1 {
		t.Errorf("%d subjects cached, want orders.created alone", n)
	}
	sl.RLock() // a sweep of the cache may run (it does without 0015)
	defer sl.RUnlock()
	for subject := range sl.cache {
		if strings.HasPrefix(subject, jsAckPre) {
			t.Fatalf("ack subject %q cached", subject)
		}
	}
}

// A client's own result cache (the read loop's L1) does not keep acks
// either: a consumer acking every event through a real server leaves
// nothing of them there, and the consumer's ack floor follows the acks.
func TestAckMatchesNotInClientCache(t *testing.T) {
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
		if _, err := js.Publish("orders.created", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := js.PullSubscribe("orders.>", "c")
	if err != nil {
		t.Fatal(err)
	}
	for got := 0; got < n; {
		msgs, err := sub.Fetch(100, nats.MaxWait(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if err := m.Ack(); err != nil {
				t.Fatal(err)
			}
			got++
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for {
		ci, err := sub.ConsumerInfo()
		if err != nil {
			t.Fatal(err)
		}
		if ci.AckFloor.Stream == n {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	var c *client
	s.mu.Lock()
	for _, cl := range s.clients {
		c = cl
	}
	s.mu.Unlock()
	if c == nil {
		t.Fatal("no client")
	}
	// The flush above went through the read loop after every ack, and
	// its PONG through c.mu: reading the read loop's cache under c.mu
	// is ordered after those writes.
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.in.results) == 0 {
		t.Fatal("the client's cache holds nothing: the publishes were not cached either")
	}
	for subject := range c.in.results {
		if strings.HasPrefix(subject, jsAckPre) {
			t.Fatalf("ack subject %q in the client's cache", subject)
		}
	}
}

// BenchmarkAckMatch is a consumer's acks reaching the account's sublist:
// every subject a new one.
func BenchmarkAckMatch(b *testing.B) {
	sl, _ := ackSublist()
	subjects := make([]string, 1<<16)
	for i := range subjects {
		subjects[i] = fmt.Sprintf("$JS.ACK.S.c.1.%d.%d.1700000000000000000.0", i+1, i+1)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if r := sl.Match(subjects[i%len(subjects)]); len(r.psubs) != 1 {
			b.Fatal("no match")
		}
		i++
	}
}
