// Modified by orderstore: this file differs from github.com/nats-io/nats-server/v2@v2.15.3
// (patches: 0023-source-scope.patch; see natsserver/README.md).

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

import "strings"

// Scoped sources (orderstore, 0023-source-scope). A stream that sources another JetStream domain
// (a hub sourcing an edge over a leaf link) believes whatever the other side sends: the deliver
// subject its consumer create answer names, and each delivery's subject and headers. With
// Options.JetStreamAdmit set (orderstore's admission, which scopes every Nats-Msg-Id as
// "<domain>/<account>:<id>" where the event is published; what a stream sources bypasses it),
// a source keeps to its own scope instead:
//   - it subscribes to the deliver subject it asked for, not to the one the answer names (which
//     could be a wildcard over other sources' deliveries);
//   - a delivery whose subject none of its subject transforms takes is not stored (it would be
//     stored on its own subject: another source's);
//   - a Nats-Msg-Id outside "<domain>/" is dropped: it would count in the stream's duplicate
//     window against another source's events.

// sourcesScoped says whether this server's sources keep to their scope.
func (s *Server) sourcesScoped() bool { return s.getOpts().JetStreamAdmit != nil }

// sourceScope is the domain si sources from when sources keep to their scope, else "". Lock
// should be held.
func (mset *stream) sourceScope(si *sourceInfo) string {
	if !mset.srv.sourcesScoped() {
		return _EMPTY_
	}
	if ssi := mset.streamSource(si.iname); ssi != nil {
		return ssi.External.Domain()
	}
	return _EMPTY_
}

// inSourceScope returns the headers to store with a delivery on subject from domain's source
// with transforms trs, and false when it is not to be stored.
func inSourceScope(domain string, trs []*subjectTransform, subject string, hdr []byte) ([]byte, bool) {
	taken := len(trs) == 0
	for _, tr := range trs {
		if tr != nil {
			_, err := tr.Match(subject)
			taken = taken || err == nil
		}
	}
	if id := getMsgId(hdr); id != _EMPTY_ && !strings.HasPrefix(id, domain+"/") {
		hdr = removeHeaderIfPresent(hdr, JSMsgId)
	}
	return hdr, taken
}
