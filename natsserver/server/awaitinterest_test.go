// Modified by orderstore: this file differs from github.com/nats-io/nats-server/v2@v2.15.3
// (patches: 0004-await-interest.patch; see natsserver/README.md).

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
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// awaitServer runs a server with account A exporting the service svc.>,
// which account B imports, and users a and b in them: a connection of each,
// and another of a (a held publish holds its connection's read loop).
func awaitServer(t *testing.T, hook func(account, subject string) time.Duration) (*Server, *nats.Conn, *nats.Conn, *nats.Conn) {
	t.Helper()
	a, b := NewAccount("A"), NewAccount("B")
	o := &Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, AwaitInterest: hook,
		Accounts: []*Account{a, b}, Users: []*User{{Username: "a", Password: "a", Account: a}, {Username: "b", Password: "b", Account: b}}}
	s, err := NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	// The server runs copies of the options' accounts.
	la, err := s.LookupAccount("A")
	if err != nil {
		t.Fatal(err)
	}
	lb, err := s.LookupAccount("B")
	if err != nil {
		t.Fatal(err)
	}
	if err := la.AddServiceExport("svc.>", nil); err != nil {
		t.Fatal(err)
	}
	if err := lb.AddServiceImport(la, "svc.>", ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	conn := func(user string) *nats.Conn {
		nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(user, user))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	return s, conn("a"), conn("b"), conn("a")
}

// A request that finds no subscriber, in its own account or through a
// service import, waits as long as the hook says for one that subscribes
// meanwhile, and gets its answer; without the hook, or when nobody comes,
// it gets "no responders".
func TestAwaitInterest(t *testing.T) {
	asked := make(chan string, 10)
	hook := func(account, subject string) time.Duration {
		asked <- account + " " + subject
		if subject == "svc.never" {
			return 50 * time.Millisecond
		}
		return 30 * time.Second
	}
	for _, c := range []struct {
		name, subject, want string
		requester           func(a, b *nats.Conn) *nats.Conn
	}{
		{"through a service import", "svc.x", "A svc.x", func(_, b *nats.Conn) *nats.Conn { return b }},
		{"in its own account", "svc.y", "A svc.y", func(a, _ *nats.Conn) *nats.Conn { return a }},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, a, b, a2 := awaitServer(t, hook)
			got := make(chan error, 1)
			go func() {
				m, err := c.requester(a, b).Request(c.subject, []byte("q"), time.Minute)
				if err == nil && string(m.Data) != "answer" {
					err = errors.New("answer " + string(m.Data))
				}
				got <- err
			}()
			if who := <-asked; who != c.want {
				t.Fatalf("hook asked about %q, want %q", who, c.want)
			}
			// The request waits now: a subscriber comes.
			if _, err := a2.Subscribe("svc.>", func(m *nats.Msg) { m.Respond([]byte("answer")) }); err != nil {
				t.Fatal(err)
			}
			a2.Flush()
			if err := <-got; err != nil {
				t.Fatalf("request: %v, want the answer of the subscriber that came while it waited", err)
			}
		})
	}
	t.Run("nobody comes", func(t *testing.T) {
		_, _, b, _ := awaitServer(t, hook)
		if _, err := b.Request("svc.never", []byte("q"), time.Minute); !errors.Is(err, nats.ErrNoResponders) {
			t.Fatalf("request: %v, want no responders once the hook's time is up", err)
		}
		if who := <-asked; who != "A svc.never" {
			t.Fatalf("hook asked about %q", who)
		}
	})
	t.Run("no hook", func(t *testing.T) {
		_, _, b, _ := awaitServer(t, nil)
		if _, err := b.Request("svc.z", []byte("q"), time.Minute); !errors.Is(err, nats.ErrNoResponders) {
			t.Fatalf("request: %v, want no responders", err)
		}
	})
	// A plain publish (no reply) never waits: the hook is not asked.
	t.Run("plain publish", func(t *testing.T) {
		_, _, b, _ := awaitServer(t, hook)
		if err := b.Publish("svc.p", []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := b.Flush(); err != nil {
			t.Fatal(err)
		}
		select {
		case who := <-asked:
			t.Fatalf("hook asked about a plain publish: %q", who)
		default:
		}
	})
}
