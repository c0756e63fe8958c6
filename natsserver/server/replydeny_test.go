// Modified by orderstore: this file differs from github.com/nats-io/nats-server/v2@v2.15.3
// (patches: 0009-reply-denied.patch, 0025-admit-fast-path.patch; see natsserver/README.md).

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

// A client may not name as its reply a subject its publish permissions
// deny: the responder would publish there for it. A reply its permissions
// do not deny is delivered as before, allow list or not.
func TestReplyDeniedLikePublish(t *testing.T) {
	o := &Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		Users: []*User{
			{Username: "limited", Password: "p", Permissions: &Permissions{
				Publish: &SubjectPermission{Allow: []string{"svc"}, Deny: []string{"secret.>"}}}},
			{Username: "free", Password: "p"},
		}}
	s := startMappingsServer(t, o)
	free, err := nats.Connect(s.ClientURL(), nats.UserInfo("free", "p"))
	if err != nil {
		t.Fatal(err)
	}
	defer free.Close()
	svc, _ := free.SubscribeSync("svc")
	secret, _ := free.SubscribeSync("secret.>")
	free.Flush()

	violations := make(chan string, 4)
	nc, err := nats.Connect(s.ClientURL(), nats.UserInfo("limited", "p"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err.Error() }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, reply := range []string{"secret.inbox.1", "_INBOX.mine"} {
		if err := nc.PublishRequest("svc", reply, []byte(reply)); err != nil {
			t.Fatal(err)
		}
	}
	nc.Flush()
	m, err := svc.NextMsg(10 * time.Second)
	if err != nil || m.Reply != "_INBOX.mine" {
		t.Fatalf("first delivery on svc: %v, %v; want the request with the reply _INBOX.mine", m, err)
	}
	select {
	case v := <-violations:
		if !strings.Contains(v, `Reply of "secret.inbox.1"`) {
			t.Fatalf("violation %q does not name the denied reply", v)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no permissions violation for a reply the client may not publish to")
	}
	// The responder answers what it got; nothing reached secret.>.
	if err := free.Publish(m.Reply, []byte("answer")); err != nil {
		t.Fatal(err)
	}
	free.Flush()
	if n, _, _ := svc.Pending(); n != 0 {
		t.Fatalf("%d more requests delivered on svc", n)
	}
	if n, _, _ := secret.Pending(); n != 0 {
		t.Fatalf("%d messages on secret.>", n)
	}
}

// replyDenied's first look (0025-admit-fast-path) skips a reply no deny
// subject can match, and sees a deny list that grew since it last looked.
func TestReplyDeniedFirstTokens(t *testing.T) {
	c := &client{kind: CLIENT}
	c.setPermissions(&Permissions{Publish: &SubjectPermission{Deny: []string{"secret.>", "x.*.y"}}})
	check := func(reply string, want bool) {
		t.Helper()
		if got := c.replyDenied([]byte(reply)); got != want {
			t.Fatalf("replyDenied(%q) = %v, want %v", reply, got, want)
		}
	}
	check("secret.inbox", true)
	check("secret", false)
	check("x.1.y", true)
	check("x.1.z", false)
	check("_INBOX.abc.1", false)
	c.mergeDenyPermissions(pub, []string{"_INBOX.abc.>"})
	check("_INBOX.abc.1", true)
	check("_INBOX.other.1", false)
	c.mergeDenyPermissions(pub, []string{"*.wild"})
	check("any.wild", true)
	check("any.tame", false)
	check("secret.inbox", true)
}
