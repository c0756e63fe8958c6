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

import "bytes"

// mayHoldNatsHeaders (orderstore, 0010-skip-header-lookups) reports whether
// a message's header block may hold one of the headers JetStream acts on
// when it stores a message. Every one of them starts "Nats-" and nats looks
// them up case-sensitively (getHeaderKeyIndex), so a header block without
// "Nats-" holds none: a stream skips its twenty-odd lookups for it. Every
// event orderstore admits carries a header of its own (Orderstore-Epoch),
// so without this each event paid for every lookup.
func mayHoldNatsHeaders(hdr []byte) bool {
	return len(hdr) > 0 && bytes.Contains(hdr, natsHeaderPrefix)
}

var natsHeaderPrefix = []byte("Nats-")
