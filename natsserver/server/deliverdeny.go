// Modified by orderstore: this file differs from github.com/nats-io/nats-server/v2@v2.15.3
// (patches: 0019-deliver-denied.patch; see natsserver/README.md).

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
	"encoding/json"
	"fmt"
	"strings"
)

// deliverDenied (orderstore, 0019-deliver-denied) returns the deliver
// subject of a client's consumer create (or update) or stream snapshot
// request that its publish permissions refuse, or "". JetStream publishes
// there, in the stream's account, on the client's behalf: a push
// consumer's every message, a snapshot's chunks. nats checks no permission
// on it, so a client that may not publish somewhere could have JetStream
// publish there for it: into another client's inbox, a stream it may not
// write. msg is the publish's headers and payload, with its CRLF. Lock
// must be held.
func (c *client) deliverDenied(subject string, msg []byte) string {
	if c.kind != CLIENT || !strings.HasPrefix(subject, "$JS.") {
		return _EMPTY_
	}
	_, verb, _ := strings.Cut(subject, ".API.")
	if !strings.HasPrefix(verb, "CONSUMER.CREATE.") && !strings.HasPrefix(verb, "CONSUMER.DURABLE.CREATE.") &&
		!strings.HasPrefix(verb, "STREAM.SNAPSHOT.") {
		return _EMPTY_
	}
	var req struct {
		DeliverSubject string `json:"deliver_subject"` // a snapshot's
		Config         struct {
			DeliverSubject string `json:"deliver_subject"` // a consumer's
		} `json:"config"`
	}
	json.Unmarshal(msg[max(c.pa.hdr, 0):len(msg)-LEN_CR_LF], &req) // nats refuses what does not parse
	for _, d := range []string{req.DeliverSubject, req.Config.DeliverSubject} {
		if d != _EMPTY_ && !c.pubAllowedFullCheck(d, true, true) {
			return d
		}
	}
	return _EMPTY_
}

// deliverSubjectViolation answers a request deliverDenied refused.
func (c *client) deliverSubjectViolation(deliver string) {
	errTxt := fmt.Sprintf("Permissions Violation for Publish with Deliver Subject of %q", deliver)
	if mt, _ := c.isMsgTraceEnabled(); mt != nil {
		mt.setIngressError(errTxt)
	}
	c.sendErr(errTxt)
	c.Errorf("Publish Violation - Deliver Subject %q", deliver)
}
