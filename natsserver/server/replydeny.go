// Modified by orderstore: this file differs from github.com/nats-io/nats-server/v2@v2.15.3
// (patches: 0009-reply-denied.patch; see natsserver/README.md).

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
	np, _ := c.perms.pub.deny.NumInterest(string(reply))
	return np != 0
}
