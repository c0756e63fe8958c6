// Modified by orderstore: this file differs from github.com/nats-io/nats-server/v2@v2.15.3
// (patches: 0019-deliver-denied.patch; see natsserver/README.md).

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
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// A client may not create a push consumer (or snapshot a stream) with a
// deliver subject its publish permissions refuse: JetStream would publish
// there for it. A deliver subject they allow is taken as before.
func TestDeliverSubjectDeniedLikePublish(t *testing.T) {
	o := &Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, JetStream: true, StoreDir: t.TempDir(),
		Users: []*User{
			{Username: "limited", Password: "p", Permissions: &Permissions{
				Publish: &SubjectPermission{Allow: []string{"$JS.API.>", "ok.>"}}}},
			{Username: "free", Password: "p"},
		}}
	s := startMappingsServer(t, o)
	free, err := nats.Connect(s.ClientURL(), nats.UserInfo("free", "p"))
	if err != nil {
		t.Fatal(err)
	}
	defer free.Close()
	secret, _ := free.SubscribeSync("secret.d")
	okd, _ := free.SubscribeSync("ok.d")
	free.Flush()
	js, _ := free.JetStream()
	if _, err := js.AddStream(&nats.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish("s.1", []byte("event")); err != nil {
		t.Fatal(err)
	}

	violations := make(chan string, 4)
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("limited", "p"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err.Error() }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, req := range []struct{ subject, body, deliver string }{
		{"$JS.API.CONSUMER.CREATE.S.c1", `{"stream_name":"S","config":{"name":"c1","deliver_subject":"secret.d"}}`, "secret.d"},
		{"$JS.API.CONSUMER.DURABLE.CREATE.S.c2", `{"stream_name":"S","config":{"durable_name":"c2","deliver_subject":"secret.d"}}`, "secret.d"},
		{"$JS.API.STREAM.SNAPSHOT.S", `{"deliver_subject":"secret.snap"}`, "secret.snap"},
	} {
		if _, err := nc.Request(req.subject, []byte(req.body), 500*time.Millisecond); err == nil {
			t.Fatalf("%s with deliver subject %s answered", req.subject, req.deliver)
		}
		select {
		case v := <-violations:
			if !strings.Contains(v, `Deliver Subject of "`+req.deliver+`"`) {
				t.Fatalf("violation %q does not name the denied deliver subject", v)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no permissions violation for %s with deliver subject %s", req.subject, req.deliver)
		}
	}
	if _, err := nc.Request("$JS.API.CONSUMER.CREATE.S.c3", []byte(`{"stream_name":"S","config":{"name":"c3","deliver_subject":"ok.d"}}`), 10*time.Second); err != nil {
		t.Fatalf("a deliver subject the permissions allow: %v", err)
	}
	if m, err := okd.NextMsg(10 * time.Second); err != nil || string(m.Data) != "event" {
		t.Fatalf("delivery on ok.d: %v, %v", m, err)
	}
	for _, name := range []string{"c1", "c2"} {
		if _, err := js.ConsumerInfo("S", name); err == nil {
			t.Fatalf("consumer %s was created", name)
		}
	}
	if n, _, _ := secret.Pending(); n != 0 {
		t.Fatalf("%d messages delivered on secret.d", n)
	}
}
