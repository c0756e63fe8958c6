package natsconf

import "github.com/orderstore/orderstore/embedded"

// The internal subjects: every subject orderstore's own parts use, in one table from which every
// export, import, permission, guard mapping and leaf list is derived (docs/security.md, "Where
// features meet"); the root package's subjects_test.go tries each row as every principal. A row
// names who may use the subject besides orderstore's own connections in StreamAccount: the client
// roles that import it, and the way it crosses a leaf link, if at all.
type internalSubject struct {
	// Pattern is the subject as StreamAccount sees it.
	Pattern string
	// Use says what it carries.
	Use string
	// Producer, Reader, Admin: the roles whose accounts import it (the anonymous loopback client,
	// when no users are configured, has the admin's). A service import unless Stream.
	Producer, Reader, Admin bool
	// Stream is a stream export (messages published in StreamAccount are
	// delivered to importers' subscribers), not a service.
	Stream bool
	// Streamed is a service answering one request with several messages.
	Streamed bool
	// HubToEdge and EdgeToHub: it crosses the leaf link that way.
	HubToEdge, EdgeToHub bool
	// For an edge's own leaf user (the shared one crosses every row): Edge, a row of that edge
	// alone; PerEdge, only Pattern with the edge's name before its '>', where the hub asks that
	// edge to deliver or answer ($JS.S.edge-1.>).
	Edge    string
	PerEdge bool
}

// HubWatchInbox is the inbox prefix of the hub watcher's connections, one per edge (HubWatchInbox.
// <edge>): its requests to the edges' JetStream API are answered on it, over the leaf link, and
// nothing else of orderstore's is.
const HubWatchInbox = "_ORDERSTORE_HUBWATCH"

// GuardPrefix is where requests on the processor's durable (and the hub's aggregate consumer) from
// any client are mapped: the durable guard answers them with an error saying why and how to make a
// consumer of one's own.
const GuardPrefix = "_ORDERSTORE_GUARD."

// internalSubjects is the table for in.
func (in Input) internalSubjects() []internalSubject {
	dlq := in.DeadLetterSubjects
	rows := []internalSubject{}
	for _, s := range in.Subjects {
		rows = append(rows, internalSubject{Pattern: s, Use: "producers' events: the stream's subjects, a service its subscription answers (nats' admission hook scopes, validates and stamps each, on the publisher's goroutine)", Producer: true, Admin: true})
	}
	rows = append(rows,
		internalSubject{Pattern: InternalInbox + ".>", Use: "replies to orderstore's own connections: acks of HTTP ingest, processor deliveries, projection reads"},
		internalSubject{Pattern: HubWatchInbox + ".>", Use: "the hub watcher's replies from edges (stream info, message gets)", EdgeToHub: true, PerEdge: true},
		internalSubject{Pattern: GuardPrefix + ">", Use: "requests on orderstore's own consumers, which the client accounts' mappings send here, answered by the durable guard", Reader: true, Admin: true},
		internalSubject{Pattern: "$JS.API.>", Use: "the JetStream API of the stream's account (readers: read-only verbs; requests on orderstore's own consumers mapped to the guard)", Reader: true, Admin: true, Streamed: true},
		internalSubject{Pattern: "$JS.ACK.>", Use: "consumer acks (acks on orderstore's own consumers mapped to the guard)", Reader: true, Admin: true},
		internalSubject{Pattern: "$JS.FC.>", Use: "flow control of push consumers and sources", Admin: true, HubToEdge: true},
		internalSubject{Pattern: "$KV.>", Use: "the projection bucket", Admin: true},
		internalSubject{Pattern: dlq, Use: "dead letters", Admin: true},
		internalSubject{Pattern: "_INBOX.>", Use: "deliveries of clients' own push consumers and KV watches in the stream's account", Admin: true, Stream: true},
		internalSubject{Pattern: "$JS.EVENT.>", Use: "JetStream advisories of the stream's account"},
		internalSubject{Pattern: "$JS.S.>", Use: "events a hub sources from an edge (deliveries, heartbeats, flow-control requests)", EdgeToHub: true, PerEdge: true},
		internalSubject{Pattern: "$JSC.R.>", Use: "nats' own replies to a hub's source-consumer requests", EdgeToHub: true, PerEdge: true},
	)
	for _, e := range in.Edges {
		rows = append(rows, internalSubject{Pattern: "$JS." + e + ".API.>", Use: "the hub's requests to edge " + e + "'s JetStream API (sourcing, the watcher)", HubToEdge: true, Edge: e})
	}
	return rows
}

// streamAccountExports are StreamAccount's exports: every row some role imports.
func (in Input) streamAccountExports() []embedded.Export {
	var ex []embedded.Export
	for _, r := range in.internalSubjects() {
		if r.Producer || r.Reader || r.Admin {
			ex = append(ex, embedded.Export{Subject: r.Pattern, Streamed: r.Streamed, Stream: r.Stream})
		}
	}
	return ex
}

// roleImports are the imports from StreamAccount of a role's account.
func (in Input) roleImports(role string) []embedded.Import {
	var im []embedded.Import
	for _, r := range in.internalSubjects() {
		if role == RoleProducer && r.Producer || role == RoleReader && r.Reader || role == RoleAdmin && r.Admin {
			im = append(im, embedded.Import{Account: StreamAccount, Subject: r.Pattern, Stream: r.Stream})
		}
	}
	return im
}

// leafLists are what crosses a leaf link: a hub's leaf listener allow lists, what a leaf peer may
// send in (fromLeaf) and what is sent out to it (toLeaf), and an edge remote's deny lists, every
// row that does not cross the link in that direction (nats' remote options take deny lists only;
// the hub's allow lists bound the rest). The edge's own domain API answers the hub (nats maps it),
// and the projection bucket and dead letters of every name stay local. With edge set, the allow
// lists are that edge's own leaf user's.
func (in Input) leafLists(edge string) (fromLeaf, toLeaf, denyImports, denyExports []string) {
	for _, r := range in.internalSubjects() {
		p, own := r.Pattern, edge != ""
		if own && r.Edge != "" && r.Edge != edge {
			continue
		} else if own && r.PerEdge {
			p = p[:len(p)-1] + edge + ".>" // before the '>'
		}
		if r.EdgeToHub {
			fromLeaf = append(fromLeaf, p)
		} else {
			denyExports = append(denyExports, r.Pattern)
		}
		if r.HubToEdge {
			toLeaf = append(toLeaf, p)
		} else {
			denyImports = append(denyImports, r.Pattern)
		}
	}
	return fromLeaf, toLeaf, denyImports, denyExports
}

// ProtectedConsumers are the consumers only orderstore's own connections may bind, pull, ack,
// change or delete: the processor's durable (on the hub, its aggregate stream's).
func (in Input) ProtectedConsumers() (stream, durable string, ok bool) {
	// With the processor disabled, nothing of orderstore's consumes it:
	// an operator may then change or remove it with natscli.
	if !in.Processor || in.Durable == "" {
		return "", "", false
	}
	return in.ConsumerStream, in.Durable, true
}

// guardMappings map every client request that would bind, pull, ack, change or delete a protected
// consumer to the durable guard, which answers with an error. A mapping, not a permission: nats'
// permission error tells a client nothing of why or what to do instead. They belong to every
// account that imports the JetStream API (nats applies an account's own mappings to its publishes
// before their permissions and imports), so that a producer's events pay for none of them.
func (in Input) guardMappings() []embedded.Mapping {
	s, d, ok := in.ProtectedConsumers()
	if !ok {
		return nil
	}
	var m []embedded.Mapping
	add := func(from, verb string) { m = append(m, embedded.Mapping{From: from, To: GuardPrefix + verb}) }
	add("$JS.API.CONSUMER.CREATE."+s+"."+d, "create")
	add("$JS.API.CONSUMER.DURABLE.CREATE."+s+"."+d, "create")
	add("$JS.API.CONSUMER.DELETE."+s+"."+d, "delete")
	add("$JS.API.CONSUMER.MSG.NEXT."+s+"."+d, "next")
	add("$JS.API.CONSUMER.PAUSE."+s+"."+d, "pause")
	add("$JS.API.CONSUMER.UNPIN."+s+"."+d, "unpin")
	add("$JS.API.CONSUMER.RESET."+s+"."+d, "reset")
	add("$JS.API.CONSUMER.LEADER.STEPDOWN."+s+"."+d, "stepdown")
	// A filtered create names its filter after the durable; both ack subject formats of nats-server
	// 2.15 (where "+NXT" is a pull too). (A mapping's destination takes its source's wildcards.)
	add("$JS.API.CONSUMER.CREATE."+s+"."+d+".>", "create.>")
	add("$JS.ACK."+s+"."+d+".>", "ack.>")
	add("$JS.ACK.*.*."+s+"."+d+".>", "ack.{{wildcard(1)}}.{{wildcard(2)}}.>")
	return m
}

// guardDenies are publish denies that no mapping can express: the
// subject-less create names its consumer in the request body.
func (in Input) guardDenies() []string {
	s, _, ok := in.ProtectedConsumers()
	if !ok {
		return nil
	}
	return []string{"$JS.API.CONSUMER.CREATE." + s}
}
