// Modified by orderstore: this file differs from github.com/nats-io/nats-server/v2@v2.15.3
// (patches: 0005-no-client-info-on-acks.patch; see natsserver/README.md).

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
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A consumer in account A read from account B through imports (orderstore's
// layout): an ack without a reply crosses without a Nats-Request-Info
// header (patch 0005-no-client-info-on-acks), an ack with a reply and a
// "+NXT" with a reply keep it, and every kind of ack still reaches the
// consumer.
func TestAckThroughImportCarriesNoClientInfo(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "server.conf")
	cfg := fmt.Sprintf(`
listen: "127.0.0.1:-1"
jetstream { store_dir: %q }
accounts {
  A: {
    jetstream: enabled
    users: [{user: a, password: a}]
    exports: [{service: "$JS.API.>", response_type: stream}, {service: "$JS.ACK.>"}]
  }
  B: {
    users: [{user: b, password: b}]
    imports: [{service: {account: A, subject: "$JS.API.>"}}, {service: {account: A, subject: "$JS.ACK.>"}}]
  }
}
`, filepath.Join(dir, "js"))
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	o.NoLog, o.NoSigs = true, true
	s, err := NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	conn := func(user string) *nats.Conn {
		nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(user, user))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	na, nb := conn("a"), conn("b")
	jsa, err := na.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jsa.AddStream(&nats.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: nats.FileStorage}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := jsa.Publish("s.x", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := jsa.AddConsumer("S", &nats.ConsumerConfig{Durable: "C", AckPolicy: nats.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	// What the acks look like in A.
	acks, err := na.SubscribeSync("$JS.ACK.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := na.Flush(); err != nil {
		t.Fatal(err)
	}

	jsb, err := nb.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	sub, err := jsb.PullSubscribe("s.x", "C", nats.Bind("S", "C"))
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := sub.Fetch(3, nats.MaxWait(5*time.Second))
	if err != nil || len(msgs) != 3 {
		t.Fatalf("fetch: %d messages, %v", len(msgs), err)
	}
	// A plain ack (no reply), an ack with a reply, and a "+NXT" with a
	// reply, which must deliver the fourth message.
	if err := msgs[0].Ack(); err != nil {
		t.Fatal(err)
	}
	if err := msgs[1].AckSync(); err != nil {
		t.Fatalf("ack with a reply: %v", err)
	}
	next, err := nb.Request(msgs[2].Reply, []byte("+NXT"), 5*time.Second)
	if err != nil {
		t.Fatalf("+NXT with a reply: %v", err)
	}
	if string(next.Data) != "3" {
		t.Fatalf("+NXT delivered %q, want the fourth message", next.Data)
	}
	if err := next.Ack(); err != nil {
		t.Fatal(err)
	}

	for i, want := range []bool{false, true, true, false} {
		m, err := acks.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("ack %d not seen in A: %v", i, err)
		}
		if got := m.Header.Get(ClientInfoHdr) != ""; got != want {
			t.Errorf("ack %d (%s, reply %q): %s present %v, want %v", i, m.Data, m.Reply, ClientInfoHdr, got, want)
		}
	}
	// Every ack reached the consumer: all four acknowledged.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ci, err := jsa.ConsumerInfo("S", "C")
		if err != nil {
			t.Fatal(err)
		}
		if ci.AckFloor.Stream == 4 && ci.NumAckPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("acks not applied: ack floor %d, pending %d", ci.AckFloor.Stream, ci.NumAckPending)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
