// Modified by orderstore: this file differs from github.com/nats-io/nats-server/v2@v2.15.3
// (patches: 0012-ack-permission-cache.patch; see natsserver/README.md).

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
	"sync/atomic"
	"testing"
)

// ackPermsClient has an allow and a deny list that both speak of acks.
func ackPermsClient() *client {
	c := &client{kind: CLIENT}
	c.setPermissions(&Permissions{Publish: &SubjectPermission{
		Allow: []string{"$JS.ACK.>", "orders.>"},
		Deny:  []string{"$JS.ACK.S.guarded.>", "orders.secret"},
	}})
	return c
}

// The verdict on an ack's subject is the lists', as before 0012, asked
// twice (the second time other subjects come from the cache); acks are
// not cached however many there are, other subjects are.
func TestAckPermissionsNotCached(t *testing.T) {
	c := ackPermsClient()
	cases := []struct {
		subject string
		want    bool
	}{
		{"$JS.ACK.S.c.1.2.3.4.5", true},
		{"$JS.ACK.S.guarded.1.2.3.4.5", false},
		{"$JS.ACK.h.a.S.guarded.1.2.3.4.5.6.7", true}, // not under the deny's tokens
		{"orders.x", true},
		{"orders.secret", false},
		{"other", false},
	}
	for round := 0; round < 2; round++ {
		for _, tc := range cases {
			if got := c.pubAllowed(tc.subject); got != tc.want {
				t.Errorf("round %d: pubAllowed(%q) = %v, want %v", round, tc.subject, got, tc.want)
			}
		}
	}
	for i := range 1000 {
		if !c.pubAllowed(fmt.Sprintf("$JS.ACK.S.c.1.%d.%d.1700000000000000000.0", i, i)) {
			t.Fatalf("ack %d denied", i)
		}
		if c.pubAllowed(fmt.Sprintf("$JS.ACK.S.guarded.1.%d.%d.1700000000000000000.0", i, i)) {
			t.Fatalf("guarded ack %d allowed", i)
		}
	}
	if n := atomic.LoadInt32(&c.perms.pcsz); n != 3 {
		t.Errorf("%d subjects cached, want the 3 that are not acks", n)
	}
	c.perms.pcache.Range(func(k, _ any) bool {
		if s := k.(string); len(s) >= len(jsAckPre) && s[:len(jsAckPre)] == jsAckPre {
			t.Errorf("ack subject %q cached", s)
		}
		return true
	})
}

// BenchmarkAckPermissions is a reader's acks with permissions in place:
// every subject a new one.
func BenchmarkAckPermissions(b *testing.B) {
	c := ackPermsClient()
	subjects := make([]string, 4096)
	for i := range subjects {
		subjects[i] = fmt.Sprintf("$JS.ACK.S.c.1.%d.%d.1700000000000000000.0", i+1, i+1)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if !c.pubAllowed(subjects[i%len(subjects)]) {
			b.Fatal("denied")
		}
		i++
	}
}
