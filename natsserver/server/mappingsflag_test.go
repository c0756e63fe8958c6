// Modified by orderstore: this file differs from github.com/nats-io/nats-server/v2@v2.15.3
// (patches: 0007-mappings-from-connect.patch, 0008-own-user.patch; see natsserver/README.md).

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
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// startMappingsServer starts a server with o and stops it when the test ends.
func startMappingsServer(t *testing.T, o *Options) *Server {
	t.Helper()
	s, err := NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	return s
}

// A publish sent in the same read as its connection's CONNECT is mapped by
// the account the CONNECT put it in, as every later publish is.
func TestMappingsApplyFromConnect(t *testing.T) {
	o := &Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true}
	acc := NewAccount("A")
	if err := acc.AddMapping("guarded", "guard"); err != nil {
		t.Fatal(err)
	}
	o.Accounts = []*Account{acc}
	o.Users = []*User{{Username: "u", Password: "p", Account: acc}}
	s := startMappingsServer(t, o)
	c, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := r.ReadString('\n'); err != nil { // INFO
		t.Fatal(err)
	}
	// One write: the CONNECT, subscriptions on both subjects, a publish
	// on the mapped one, and a PING to know when it was all processed.
	if _, err := c.Write([]byte("CONNECT {\"verbose\":false,\"user\":\"u\",\"pass\":\"p\"}\r\nSUB guarded 1\r\nSUB guard 2\r\nPUB guarded 2\r\nhi\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var got []string
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		l = strings.TrimSpace(l)
		if l == "PONG" {
			break
		}
		if strings.HasPrefix(l, "MSG ") {
			got = append(got, strings.Fields(l)[1])
		}
	}
	// The PONG follows the delivery (one connection, in order).
	if strings.Join(got, " ") != "guard" {
		t.Fatalf("the publish in the CONNECT's read was delivered on %q, want only on the mapped subject \"guard\"", got)
	}
}

// The user of Options.MappingsExemptNkey publishes past its account's
// mappings; another user of that account is mapped.
func TestMappingsExemptNkey(t *testing.T) {
	own, _ := nkeys.CreateUser()
	ownPub, _ := own.PublicKey()
	other, _ := nkeys.CreateUser()
	otherPub, _ := other.PublicKey()
	acc := NewAccount("A")
	if err := acc.AddMapping("guarded", "guard"); err != nil {
		t.Fatal(err)
	}
	o := &Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, MappingsExemptNkey: ownPub,
		Accounts: []*Account{acc}, Nkeys: []*NkeyUser{{Nkey: ownPub, Account: acc}, {Nkey: otherPub, Account: acc}}}
	s := startMappingsServer(t, o)
	connect := func(kp nkeys.KeyPair) *nats.Conn {
		pub, _ := kp.PublicKey()
		nc, err := nats.Connect(s.ClientURL(), nats.Nkey(pub, kp.Sign))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	watch := connect(other)
	guarded, _ := watch.SubscribeSync("guarded")
	guard, _ := watch.SubscribeSync("guard")
	watch.Flush()
	for _, c := range []struct {
		name string
		kp   nkeys.KeyPair
		want *nats.Subscription
	}{{"exempt", own, guarded}, {"other", other, guard}} {
		nc := connect(c.kp)
		if err := nc.Publish("guarded", []byte(c.name)); err != nil {
			t.Fatal(err)
		}
		nc.Flush()
		m, err := c.want.NextMsg(10 * time.Second)
		if err != nil || string(m.Data) != c.name {
			t.Fatalf("%s user's publish on guarded: %v, %v; want it on %s", c.name, m, err, c.want.Subject)
		}
	}
	watch.Flush()
	for _, sub := range []*nats.Subscription{guarded, guard} {
		if n, _, _ := sub.Pending(); n != 0 {
			t.Fatalf("%d more on %s", n, sub.Subject)
		}
	}
}
