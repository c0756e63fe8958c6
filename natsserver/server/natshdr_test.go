// Modified by orderstore: this file differs from github.com/nats-io/nats-server/v2@v2.15.3
// (patches: 0010-skip-header-lookups.patch; see natsserver/README.md).

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

func TestMayHoldNatsHeaders(t *testing.T) {
	for hdr, want := range map[string]bool{
		"":                 false,
		"NATS/1.0\r\n\r\n": false,
		"NATS/1.0\r\nOrderstore-Epoch: e1\r\n\r\n": false,
		"NATS/1.0\r\nnats-msg-id: a\r\n\r\n":       false, // nats' lookups are case-sensitive: upstream ignores it too
		"NATS/1.0\r\nNats-Msg-Id: a\r\n\r\n":       true,
		"NATS/1.0\r\nA: b\r\nNats-TTL: 1s\r\n\r\n": true,
		"NATS/1.0\r\nA: Nats-\r\n\r\n":             true, // a value: looked up as before, and found nothing
	} {
		if got := mayHoldNatsHeaders([]byte(hdr)); got != want {
			t.Errorf("mayHoldNatsHeaders(%q) = %v, want %v", hdr, got, want)
		}
	}
}

// A stream acts on nats' headers beside headers of the publisher's own, and
// stores a message that has only its own; the lookups it skips for those
// change nothing.
func TestHeaderLookupsSkippedOnlyWithoutNatsHeaders(t *testing.T) {
	_, nc := gcServer(t, nil)
	pub := func(h nats.Header) JSPubAckResponse {
		t.Helper()
		m, err := nc.RequestMsg(&nats.Msg{Subject: "orders.x", Header: h, Data: []byte("{}")}, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return pubAckOf(t, m)
	}
	own := func(kv ...string) nats.Header {
		h := nats.Header{"Orderstore-Epoch": {"e1"}}
		for i := 0; i < len(kv); i += 2 {
			h[kv[i]] = []string{kv[i+1]} // as spelled: no canonical form
		}
		return h
	}
	if r := pub(own()); r.Error != nil || r.PubAck.Sequence != 1 {
		t.Fatalf("own header only: %+v %v, want stored at 1", r.PubAck, r.Error)
	}
	if r := pub(own("Nats-Msg-Id", "a")); r.Error != nil || r.PubAck.Sequence != 2 || r.Duplicate {
		t.Fatalf("first Nats-Msg-Id a: %+v %v, want stored at 2", r.PubAck, r.Error)
	}
	if r := pub(own("Nats-Msg-Id", "a")); r.Error != nil || !r.Duplicate || r.PubAck.Sequence != 2 {
		t.Fatalf("second Nats-Msg-Id a: %+v %v, want a duplicate of 2", r.PubAck, r.Error)
	}
	if r := pub(own("nats-msg-id", "a")); r.Error != nil || r.Duplicate || r.PubAck.Sequence != 3 {
		t.Fatalf("nats-msg-id a: %+v %v, want stored at 3 (not nats' spelling)", r.PubAck, r.Error)
	}
	// The stream does not allow per-message TTLs: refused, in the consistency
	// checks and by the TTL lookup at the store.
	if r := pub(own("Nats-TTL", "1s")); r.Error == nil || !strings.Contains(r.Error.Description, "TTL") {
		t.Fatalf("Nats-TTL on a stream without TTLs: %+v %v, want refused", r.PubAck, r.Error)
	}
	if r := pub(own("Nats-Expected-Last-Sequence", "2")); r.Error == nil {
		t.Fatalf("Nats-Expected-Last-Sequence 2 with the last at 3: %+v, want refused", r.PubAck)
	}
	if r := pub(own("Nats-Expected-Last-Sequence", "3")); r.Error != nil || r.PubAck.Sequence != 4 {
		t.Fatalf("Nats-Expected-Last-Sequence 3: %+v %v, want stored at 4", r.PubAck, r.Error)
	}
}
