// Modified by orderstore: this file differs from github.com/nats-io/nats-server/v2@v2.15.3
// (patches: 0007-mappings-from-connect.patch; see natsserver/README.md).

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
)

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
	s, err := NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	defer func() { s.Shutdown(); s.WaitForShutdown() }()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
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
