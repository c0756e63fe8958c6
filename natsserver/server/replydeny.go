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
	"bytes"
	"sync/atomic"
)

// replyDenied (orderstore, 0009-reply-denied) reports whether a client's
// reply subject is one its publish permissions deny. A reply subject names
// where the receiver answers: the stream's PubAck, the JetStream API's
// response, any service's reply. nats checks no permission on it, so a
// client denied publishing to a subject could still have the server (or
// any responder) publish there for it: into another client's inbox, an
// answer forged to a request that client is waiting on. Only the explicit
// deny list counts: an allow list says what the client may publish, not
// where others may answer it (every request's reply is an inbox no allow
// list names). Lock must be held.
func (c *client) replyDenied(reply []byte) bool {
	if c.kind != CLIENT || len(reply) == 0 || c.perms == nil || c.perms.pub.deny == nil {
		return false
	}
	deny := c.perms.pub.deny
	// (0025-admit-fast-path) Most replies are inboxes whose first token no
	// deny subject has: skip the walk, and the lookup of the whole reply.
	f := c.perms.replyFirsts
	if f == nil || f.sl != deny || f.gen != atomic.LoadUint64(&deny.genid) {
		f = newReplyFirsts(deny)
		c.perms.replyFirsts = f
	}
	if !f.wild {
		first, _, _ := bytes.Cut(reply, []byte{btsep})
		if _, ok := f.firsts[string(first)]; !ok {
			return false
		}
	}
	np, _ := deny.NumInterest(string(reply))
	return np != 0
}

// replyFirsts (orderstore, 0025-admit-fast-path) is what replyDenied knows
// of a deny list before it looks a reply up: the literal first tokens of its
// subjects, and whether one starts with a wildcard, at the list's generation
// gen (a later insert or removal changes it, and the next check reads the
// list again).
type replyFirsts struct {
	sl     *Sublist
	gen    uint64
	firsts map[string]struct{}
	wild   bool
}

func newReplyFirsts(sl *Sublist) *replyFirsts {
	sl.RLock()
	defer sl.RUnlock()
	f := &replyFirsts{sl: sl, gen: atomic.LoadUint64(&sl.genid), firsts: make(map[string]struct{}, len(sl.root.nodes)),
		wild: sl.root.pwc != nil || sl.root.fwc != nil}
	for tok := range sl.root.nodes {
		f.firsts[tok] = struct{}{}
	}
	return f
}
