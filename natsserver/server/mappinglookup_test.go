// Modified by orderstore: this file differs from github.com/nats-io/nats-server/v2@v2.15.3
// (patches: 0011-mapping-lookups.patch; see natsserver/README.md).

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

import "testing"

// upstreamMappingFor is v2.15.3's choice of mapping for dest (every
// source not equal to dest subset-matched against dest's tokens), kept
// here to check that 0011-mapping-lookups chooses the same.
func upstreamMappingFor(a *Account, dest string) *mapping {
	tts := tokenizeSubjectIntoSlice(nil, dest)
	for _, rm := range a.mappings {
		if !rm.wc && rm.src == dest {
			return rm
		}
		if isSubsetMatch(tts, rm.src) {
			return rm
		}
	}
	return nil
}

// guardLikeMappings adds mappings shaped like orderstore's durable guard
// (literal sources, a wildcard tail, wildcards inside) and a few more.
func guardLikeMappings(t testing.TB, a *Account) {
	t.Helper()
	for _, m := range [][2]string{
		{"$JS.API.CONSUMER.CREATE.S.D", "guard.create"},
		{"$JS.API.CONSUMER.DELETE.S.D", "guard.delete"},
		{"$JS.API.CONSUMER.MSG.NEXT.S.D", "guard.next"},
		{"$JS.API.CONSUMER.PAUSE.S.D", "guard.pause"},
		{"$JS.API.CONSUMER.CREATE.S.D.>", "guard.create.>"},
		{"$JS.ACK.S.D.>", "guard.ack.>"},
		{"$JS.ACK.*.*.S.D.>", "guard.ack.{{wildcard(1)}}.{{wildcard(2)}}.>"},
		{"a.*.c", "x.{{wildcard(1)}}"},
		{"a.b", "lit.ab"},
		{"*.b.>", "y.{{wildcard(1)}}.>"},
	} {
		if err := a.AddMapping(m[0], m[1]); err != nil {
			t.Fatalf("AddMapping(%q, %q): %v", m[0], m[1], err)
		}
	}
}

// TestMappingLookupChoosesAsUpstream checks, over subjects that match
// each kind of source and subjects that match none (wildcards in the
// subject too), that selectMappedSubject picks the mapping upstream's
// loop picks, and maps to its destination.
func TestMappingLookupChoosesAsUpstream(t *testing.T) {
	a := NewAccount("A")
	guardLikeMappings(t, a)
	for _, dest := range []string{
		"$JS.API.CONSUMER.CREATE.S.D", "$JS.API.CONSUMER.DELETE.S.D", "$JS.API.CONSUMER.MSG.NEXT.S.D",
		"$JS.API.CONSUMER.CREATE.S.D.orders.x", "$JS.API.CONSUMER.CREATE.S.E", "$JS.API.CONSUMER.CREATE.S",
		"$JS.ACK.S.D.1.2.3.4.5.6", "$JS.ACK.h.a.S.D.1.2.3", "$JS.ACK.S.E.1.2", "$JS.ACK.h.a.S.E.1",
		"a.x.c", "a.b", "a.b.c", "a.b.c.d", "z.b.q", "z.b", "a.*.c", "a.>", "*.b.x", "orders.created",
		"$KV.orders.o-1", "_INBOX.abc.def", "a", "b.b.b.b",
	} {
		want := upstreamMappingFor(a, dest)
		ndest, ok := a.selectMappedSubject(dest)
		switch {
		case want == nil && (ok || ndest != dest):
			t.Errorf("%q: mapped to %q, upstream maps nothing", dest, ndest)
		case want == nil:
		case !ok:
			t.Errorf("%q: not mapped, upstream maps it by %q", dest, want.src)
		case want.dests[0].tr.TransformSubject(dest) != ndest:
			t.Errorf("%q: mapped to %q, upstream's mapping %q gives %q", dest, ndest, want.src, want.dests[0].tr.TransformSubject(dest))
		}
	}
}

// BenchmarkSelectMappedSubject is a producer's publish in an account
// holding the guard's mappings: none applies.
func BenchmarkSelectMappedSubject(b *testing.B) {
	a := NewAccount("A")
	guardLikeMappings(b, a)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := a.selectMappedSubject("orders.created"); ok {
			b.Fatal("mapped")
		}
	}
}
