// Modified by orderstore: this file differs from github.com/nats-io/nats-server/v2@v2.15.3
// (patches: 0002-admission.patch, 0008-own-user.patch, 0013-admit-without-stream-lock.patch, 0024-admit-unanswered.patch, 0025-admit-fast-path.patch; see natsserver/README.md).

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

import "encoding/json"

// AdmitMsg (orderstore's patch 0002-admission) is a message published into
// a stream, as Options.JetStreamAdmit sees it.
//
// JetStreamAdmit runs on the publisher's own goroutine (its connection's
// read loop), before the message is queued for the stream: the work it does
// spreads over every CPU, and each connection pays for its own messages.
// It sees what clients, leaf nodes and internal clients publish on the
// stream's subjects at this server; it does not see what the stream sources
// or mirrors. In a cluster only the stream's leader subscribes to its
// subjects, and a publish made at another node arrives from a route
// (Kind "Router") in the stream's account.
//
// It returns the headers to store (nil keeps the message's own; a non-nil
// value replaces them, in NATS wire form "NATS/1.0\r\n...\r\n\r\n") or an
// error: the publisher then gets that error as its PubAck (when it asked
// for a reply), at once, and nothing is stored. It must not keep the
// message, its Header or its Data after it returns. A hook that refuses may clear Reply: the refusal
// is then not answered (0024-admit-unanswered: one of nats' own clients
// cannot read an answer, and one sent on the stream's subjects comes back).
type AdmitMsg struct {
	Stream        string // the stream's name
	StreamAccount string // the stream's account
	Account       string // the account the publisher's connection is bound to
	Kind          string // the publisher's connection: "Client", "Leafnode", "Router", "JetStream", "System", "Account", ...
	Nkey          string // the publisher's user nkey, when it signed in with one (0008-own-user)
	Subject       string
	Reply         string
	Header        []byte // NATS wire form, or nil
	Data          []byte

	queue *ipQueue[*inMsg]
}

// Queued is what waits in the stream's inbound queue now (messages and
// bytes): past the stream's limits (100,000 messages or 128 MiB by
// default) nats answers a publish 429. A hook may hold a publisher back
// (its read loop, so that connection alone waits) while the queue is deep.
func (m *AdmitMsg) Queued() (msgs int, bytes uint64) {
	if m.queue == nil {
		return 0, 0
	}
	// (0025-admit-fast-path) One lock for both: this runs on every publish.
	q := m.queue
	q.Lock()
	msgs, bytes = len(q.elts)-q.pos, q.sz
	q.Unlock()
	return msgs, bytes
}

// admit runs the admission hook for one inbound message; false means it
// was refused (and answered).
func (mset *stream) admit(admit func(*AdmitMsg) ([]byte, *ApiError), c *client, subject, reply string, hdr, msg []byte) ([]byte, bool) {
	// (0025-admit-fast-path) A client's messages all come from its read
	// loop, one at a time: each reuses one AdmitMsg instead of a new one on
	// the heap for every publish. Other kinds' may come from more than one
	// goroutine (an internal client's).
	m := c.admitMsg
	if c.kind != CLIENT {
		m = new(AdmitMsg)
	} else if m == nil {
		m = new(AdmitMsg)
		c.admitMsg = m
	}
	defer func() { *m = AdmitMsg{} }() // nothing of the message kept alive
	*m = AdmitMsg{Subject: subject, Reply: reply, Header: hdr, Data: msg, Kind: c.kindString(), queue: mset.msgs,
		Stream: mset.admitStream, StreamAccount: mset.admitAccount}
	if c.acc != nil {
		m.Account = c.acc.Name
	}
	c.mu.Lock()
	if c.user != nil {
		m.Nkey = c.user.Nkey
	}
	c.mu.Unlock()
	nhdr, apiErr := admit(m)
	if apiErr != nil {
		if reply != _EMPTY_ && m.Reply != _EMPTY_ {
			resp := &JSPubAckResponse{PubAck: &PubAck{Stream: m.Stream}, Error: apiErr}
			b, _ := json.Marshal(resp)
			mset.outq.sendMsg(reply, b)
		}
		return nil, false
	}
	if nhdr != nil {
		hdr = nhdr
	}
	return hdr, true
}
