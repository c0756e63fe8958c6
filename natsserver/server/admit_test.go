// Modified by orderstore: this file differs from github.com/nats-io/nats-server/v2@v2.15.3
// (patches: 0002-admission.patch, 0024-admit-unanswered.patch; see natsserver/README.md).

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
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// The admission hook sees each publish with the publisher's account and
// connection kind, on the publisher's goroutine; a refusal reaches the
// publisher as its JetStream API error with nothing stored; an admitted
// message is stored with the headers the hook returns. Both durability
// modes: group commit and always.
func TestAdmitHook(t *testing.T) {
	for _, gc := range []bool{true, false} {
		t.Run(fmt.Sprintf("groupcommit=%v", gc), func(t *testing.T) {
			gcResetHooks(t)
			var mu sync.Mutex
			var seen []AdmitMsg
			s, nc := gcServer(t, func(o *Options) {
				o.GroupCommit, o.SyncAlways = gc, !gc
				o.JetStreamAdmit = func(m *AdmitMsg) ([]byte, *ApiError) {
					mu.Lock()
					c := *m
					c.Header, c.Data = bytes.Clone(m.Header), bytes.Clone(m.Data)
					seen = append(seen, c)
					mu.Unlock()
					if m.Subject == "orders.bad" {
						return nil, &ApiError{Code: 400, ErrCode: 10422, Description: "orderstore: refused " + string(m.Data)}
					}
					return []byte("NATS/1.0\r\nAdmitted-By: " + m.Account + "\r\n\r\n"), nil
				}
			})
			js, _ := nc.JetStream()
			_, err := js.Publish("orders.bad", []byte("x"))
			var apiErr *nats.APIError
			if !errors.As(err, &apiErr) || apiErr.Code != 400 || apiErr.ErrorCode != 10422 || apiErr.Description != "orderstore: refused x" {
				t.Fatalf("refused publish: %v, want the hook's 400/10422", err)
			}
			ack, err := js.Publish("orders.good", []byte("y"), nats.MsgId("m1"))
			if err != nil {
				t.Fatal(err)
			}
			if ack.Sequence != 1 {
				t.Fatalf("admitted publish stored as %d, want 1 (the refused one stored nothing)", ack.Sequence)
			}
			m, err := js.GetMsg("ORDERS", 1)
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Header.Get("Admitted-By"); got != globalAccountName {
				t.Fatalf("stored header Admitted-By %q, want %q", got, globalAccountName)
			}
			if got := m.Header.Get(JSMsgId); got != "" {
				t.Fatalf("the hook's headers replace the message's: Nats-Msg-Id %q kept", got)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != 2 {
				t.Fatalf("hook saw %d messages, want 2", len(seen))
			}
			g := seen[1]
			if g.Stream != "ORDERS" || g.StreamAccount != globalAccountName || g.Account != globalAccountName || g.Kind != "Client" ||
				g.Subject != "orders.good" || g.Reply == "" || string(g.Data) != "y" || !bytes.Contains(g.Header, []byte("Nats-Msg-Id: m1")) {
				t.Fatalf("hook saw %+v", g)
			}
			var st StreamState
			mset, _ := s.GlobalAccount().lookupStream("ORDERS")
			mset.store.FastState(&st)
			if st.Msgs != 1 {
				t.Fatalf("stream holds %d, want 1", st.Msgs)
			}
		})
	}
}

// A hook that refuses and clears Reply leaves the publish unanswered
// (0024-admit-unanswered); one that keeps Reply is answered as before.
func TestAdmitRefusalUnanswered(t *testing.T) {
	gcResetHooks(t)
	_, nc := gcServer(t, func(o *Options) {
		o.JetStreamAdmit = func(m *AdmitMsg) ([]byte, *ApiError) {
			if m.Subject == "orders.quiet" {
				m.Reply = ""
			}
			return nil, &ApiError{Code: 403, ErrCode: 10077, Description: "refused " + m.Subject}
		}
	})
	sub, err := nc.SubscribeSync("answers")
	if err != nil {
		t.Fatal(err)
	}
	for _, subject := range []string{"orders.quiet", "orders.loud"} {
		if err := nc.PublishRequest(subject, "answers", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	// The stream answers in order: the first answer is the loud one's.
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(m.Data, []byte("refused orders.loud")) {
		t.Fatalf("first answer %s, want the refusal of orders.loud (orders.quiet's is not answered)", m.Data)
	}
}

// A publish into a stream of another account, through an import, reaches
// the hook with the publisher's own account; a plain publish (no reply)
// that is refused stores nothing and answers nothing.
func TestAdmitHookImportingAccount(t *testing.T) {
	gcResetHooks(t)
	var accounts sync.Map
	var refused atomic.Int64
	conf := admitConfFile(t, `
		listen: 127.0.0.1:-1
		jetstream: {store_dir: "`+t.TempDir()+`"}
		accounts {
			STREAM: {jetstream: enabled, users: [{user: s, password: s}], exports: [{stream: "orders.>"}, {service: "orders.>"}]}
			PROD: {users: [{user: p, password: p}], imports: [{service: {account: STREAM, subject: "orders.>"}}]}
		}
	`)
	o, err := ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	o.NoSigs, o.NoLog, o.GroupCommit = true, true, true
	o.JetStreamAdmit = func(m *AdmitMsg) ([]byte, *ApiError) {
		accounts.Store(m.Account+"/"+m.StreamAccount, true)
		if bytes.Equal(m.Data, []byte("bad")) {
			refused.Add(1)
			return nil, &ApiError{Code: 400, ErrCode: 10422, Description: "bad"}
		}
		return nil, nil
	}
	s, err := NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("not ready")
	}
	ns, err := nats.Connect(s.ClientURL(), nats.UserInfo("s", "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	jss, _ := ns.JetStream()
	if _, err := jss.AddStream(&nats.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		t.Fatal(err)
	}
	np, err := nats.Connect(s.ClientURL(), nats.UserInfo("p", "p"))
	if err != nil {
		t.Fatal(err)
	}
	defer np.Close()
	if _, err := np.Request("orders.created", []byte("ok"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := np.Publish("orders.created", []byte("bad")); err != nil {
		t.Fatal(err)
	}
	if _, err := np.Request("orders.created", []byte("ok2"), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, ok := accounts.Load("PROD/STREAM"); !ok {
		var got []any
		accounts.Range(func(k, _ any) bool { got = append(got, k); return true })
		t.Fatalf("hook saw publisher/stream accounts %v, want PROD/STREAM", got)
	}
	if refused.Load() != 1 {
		t.Fatalf("refused %d, want 1", refused.Load())
	}
	si, err := jss.StreamInfo("ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	if si.State.Msgs != 2 {
		t.Fatalf("stream holds %d, want 2 (the refused plain publish stores nothing)", si.State.Msgs)
	}
}

func admitConfFile(t *testing.T, conf string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(p, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
