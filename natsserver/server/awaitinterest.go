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

import "time"

// awaitInterestPoll is how often a held publish looks for a subscriber.
const awaitInterestPoll = 20 * time.Millisecond

// awaitInterest (orderstore's patch 0004-await-interest) holds a client's
// publish that found no subscriber (r) on subject in acc, when
// Options.AwaitInterest asks for it, until someone subscribes or the time
// it gave is up; it returns the subscribers then. Only a client with a
// reply subject waits (a request, a JetStream publish): on its own read
// loop, so that connection alone waits, as it would for its answer. A
// clustered stream has a subscription at its leader only, and while its
// replicas elect a new one nats would answer its publishers "no
// responders" at once.
func (c *client) awaitInterest(acc *Account, subject string, r *SublistResult) *SublistResult {
	wait := c.srv.getOpts().AwaitInterest
	if wait == nil || c.kind != CLIENT || len(c.pa.reply) == 0 || acc == nil {
		return r
	}
	d := wait(acc.Name, subject)
	if d <= 0 {
		return r
	}
	for until := time.Now().Add(d); time.Now().Before(until); {
		time.Sleep(awaitInterestPoll)
		if nr := acc.sl.Match(subject); len(nr.psubs)+len(nr.qsubs) > 0 {
			return nr
		}
	}
	return r
}
