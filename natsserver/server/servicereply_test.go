// Modified by orderstore: this file differs from github.com/nats-io/nats-server/v2@v2.15.3
// (patches: 0016-service-reply-collisions.patch; see natsserver/README.md).

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
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Two requests through a service import whose replies' random parts are
// the same, both awaiting their responses at once: each requester gets
// its own answer (0016-service-reply-collisions). Without the patch the
// second request's mapping replaced the first's: the first answer went to
// the second requester and the second answer nowhere.
func TestServiceReplyCollisionAnswersBoth(t *testing.T) {
	var calls atomic.Int64
	forced := func() uint64 {
		if calls.Add(1) <= 2 {
			return 42 // the first two replies collide
		}
		return rand.Uint64()
	}
	serviceReplyRand.Store(&forced)
	t.Cleanup(func() { serviceReplyRand.Store(nil) })

	dir := t.TempDir()
	conf := filepath.Join(dir, "server.conf")
	cfg := `
listen: "127.0.0.1:-1"
accounts {
  A: {
    users: [{user: a, password: a}]
    exports: [{service: "svc.>"}]
  }
  B: {
    users: [{user: b, password: b}]
    imports: [{service: {account: A, subject: "svc.>"}}]
  }
}
`
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

	// The responder answers only once both requests are in, so that both
	// replies await their responses at once.
	reqs := make(chan *nats.Msg, 2)
	if _, err := na.ChanSubscribe("svc.>", reqs); err != nil {
		t.Fatal(err)
	}
	if err := na.Flush(); err != nil {
		t.Fatal(err)
	}
	answers := make(chan *nats.Msg, 4)
	for i := range 2 {
		inbox := fmt.Sprintf("reply.%d", i)
		if _, err := nb.ChanSubscribe(inbox, answers); err != nil {
			t.Fatal(err)
		}
		if err := nb.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := nb.PublishRequest(fmt.Sprintf("svc.%d", i), inbox, nil); err != nil {
			t.Fatal(err)
		}
	}
	var in []*nats.Msg
	for len(in) < 2 {
		select {
		case m := <-reqs:
			in = append(in, m)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of 2 requests reached the responder", len(in))
		}
	}
	if in[0].Reply == in[1].Reply {
		t.Fatalf("both requests were given the reply %q", in[0].Reply)
	}
	if calls.Load() < 3 {
		t.Fatalf("%d replies made: the second reply was not made again after the forced collision", calls.Load())
	}
	for _, m := range in {
		if err := m.Respond([]byte("answer to " + m.Subject)); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]string{}
	for len(got) < 2 {
		select {
		case m := <-answers:
			if prev, twice := got[m.Subject]; twice {
				t.Fatalf("%s answered twice: %q and %q", m.Subject, prev, m.Data)
			}
			got[m.Subject] = string(m.Data)
		case <-time.After(10 * time.Second):
			t.Fatalf("answers received: %v, want one on each of reply.0 and reply.1", got)
		}
	}
	for i := range 2 {
		if want := fmt.Sprintf("answer to svc.%d", i); got[fmt.Sprintf("reply.%d", i)] != want {
			t.Errorf("reply.%d got %q, want %q", i, got[fmt.Sprintf("reply.%d", i)], want)
		}
	}
}
