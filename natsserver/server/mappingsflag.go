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

// setMappingsFlag (orderstore, 0007-mappings-from-connect) notes whether
// the client's account has subject mappings, for the parser, right after
// its CONNECT registered it with that account. The read loop notes it only
// before each read, with the account the connection had then: the global
// account, before the CONNECT. So a publish sent in the same read as the
// CONNECT escaped the mappings of the account it was published in (nats'
// own mapping-before-permission order lets an account map a request to a
// service that refuses it; a pipelined one went where it was sent).
// Called on the read loop's goroutine, which owns c.in.
func (c *client) setMappingsFlag() {
	if c.kind != CLIENT && c.kind != LEAF {
		return
	}
	c.mu.Lock()
	acc, exempt := c.acc, c.mappingsExempt
	c.mu.Unlock()
	if acc != nil && acc.hasMappings() && !exempt {
		c.in.flags.set(hasMappings)
	} else {
		c.in.flags.clear(hasMappings)
	}
}

// isMappingsExempt (orderstore, 0008-own-user) says whether user is
// Options.MappingsExemptNkey, whose publishes no account's mappings apply
// to. The embedding program's own connections can then share an account
// with clients whose requests the account maps elsewhere.
// Lock should be held.
func (c *client) isMappingsExempt(user *NkeyUser) bool {
	if user == nil || user.Nkey == _EMPTY_ || c.srv == nil {
		return false
	}
	return user.Nkey == c.srv.getOpts().MappingsExemptNkey
}
