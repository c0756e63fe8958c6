package orderstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/orderstore/orderstore/natsserver/server"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/orderstoretest"
)

// subjectRow is one row of the internal subjects table (internal/natsconf/subjects.go) as
// this test expects it, written out again here so that a change of the
// product's table shows up as a change of behaviour: Pattern as
// StreamAccount sees it, and Subject, a concrete subject it matches.
type subjectRow struct {
	pattern, subject string
	// producer, reader, admin: the roles whose accounts import the row
	// (the anonymous loopback client has the admin's imports; the system
	// user none). A service import, unless stream.
	producer, reader, admin bool
	// stream: a stream import, so StreamAccount's publishes reach an
	// importer's subscribers (and an importer's publishes stay its own).
	stream bool
	// hubToEdge, edgeToHub: the leaf link directions it crosses.
	hubToEdge, edgeToHub bool
}

// expectedSubjects is the table for the default stream (orders.>), its
// dead-letter stream and a hub's edges.
func expectedSubjects(edges ...string) []subjectRow {
	rows := []subjectRow{
		// The stream's own subjects: a service its subscription answers
		// (orderstore's side here listens beside it).
		{pattern: "orders.>", subject: "orders.created", producer: true, admin: true},
		{pattern: "_INBOX_ORDERSTORE.>", subject: "_INBOX_ORDERSTORE.x.y"},
		{pattern: "_ORDERSTORE_HUBWATCH.>", subject: "_ORDERSTORE_HUBWATCH.probe.1", edgeToHub: true},
		// Where the client accounts' mappings send requests on orderstore's
		// own consumers: the durable guard answers them with an error.
		{pattern: "_ORDERSTORE_GUARD.>", subject: "_ORDERSTORE_GUARD.next", reader: true, admin: true},
		{pattern: "$JS.API.>", subject: "$JS.API.INFO", reader: true, admin: true},
		{pattern: "$JS.ACK.>", subject: "$JS.ACK.ORDER_EVENTS.someone.1.1.1.1.0", reader: true, admin: true},
		{pattern: "$JS.FC.>", subject: "$JS.FC.ORDER_EVENTS.probe.1", admin: true, hubToEdge: true},
		{pattern: "$KV.>", subject: "$KV.ORDERS.principal-probe", admin: true},
		{pattern: "dlq.ORDER_EVENTS_DLQ.>", subject: "dlq.ORDER_EVENTS_DLQ.orders.created", admin: true},
		{pattern: "_INBOX.>", subject: "_INBOX.probe", admin: true, stream: true},
		{pattern: "$JS.EVENT.>", subject: "$JS.EVENT.ADVISORY.probe"},
		{pattern: "$JS.S.>", subject: "$JS.S.abc", edgeToHub: true},
		{pattern: "$JSC.R.>", subject: "$JSC.R.abc", edgeToHub: true},
	}
	for _, e := range edges {
		rows = append(rows, subjectRow{pattern: "$JS." + e + ".API.>", subject: "$JS." + e + ".API.INFO", hubToEdge: true})
	}
	return rows
}

// imports is the table's rule: which rows a role's account imports.
func (r subjectRow) imports(role string) bool {
	switch role {
	case orderstore.RoleProducer:
		return r.producer
	case orderstore.RoleReader:
		return r.reader
	case orderstore.RoleAdmin:
		return r.admin
	}
	return false // the system user: nothing of StreamAccount's
}

// probe is a message body that names itself (a valid event, should a
// stream store it and the processor project it).
func probe(marker string) []byte { return []byte(fmt.Sprintf(`{"order_id":%q}`, marker)) }

// msgLog collects the messages of one or more ChanSubscribe
// subscriptions in the order the connection delivered them: once a
// control message is in it, so is everything delivered before.
type msgLog struct {
	ch   chan *nats.Msg
	mu   sync.Mutex
	msgs []*nats.Msg
}

// newMsgLog drains its channel; hook, if set, sees each message first
// (on the draining goroutine).
func newMsgLog(t *testing.T, hook func(*nats.Msg)) *msgLog {
	l := &msgLog{ch: make(chan *nats.Msg, 1<<16)}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case m := <-l.ch:
				if hook != nil {
					hook(m)
				}
				l.mu.Lock()
				l.msgs = append(l.msgs, m)
				l.mu.Unlock()
			case <-done:
				return
			}
		}
	}()
	t.Cleanup(func() { close(done) })
	return l
}

// with returns the messages whose body is probe(marker).
func (l *msgLog) with(marker string) []*nats.Msg {
	want := string(probe(marker))
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*nats.Msg
	for _, m := range l.msgs {
		if string(m.Data) == want {
			out = append(out, m)
		}
	}
	return out
}

// on returns the messages on subjects matching pattern.
func (l *msgLog) on(pattern string) []*nats.Msg {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*nats.Msg
	for _, m := range l.msgs {
		if subjectMatches(pattern, m.Subject) {
			out = append(out, m)
		}
	}
	return out
}

// sync returns once everything already in the channel is in the log.
func (l *msgLog) sync(t *testing.T) {
	t.Helper()
	mark := "_sync." + nuid.Next()
	l.ch <- &nats.Msg{Subject: mark}
	l.waitFor(t, "sync mark", func() bool { return len(l.on(mark)) > 0 })
}

func (l *msgLog) waitFor(t *testing.T, what string, f func() bool) {
	t.Helper()
	embeddedtest.WaitFor(t, 15*time.Second, func() error {
		if !f() {
			return errors.New("no " + what)
		}
		return nil
	})
}

// subjectMatches is nats' subject matching ('*' a token, '>' the rest).
func subjectMatches(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || tok != "*" && tok != s[i] {
			return false
		}
	}
	return len(p) == len(s)
}

// onSubject keeps the messages on subject.
func onSubject(ms []*nats.Msg, subject string) []*nats.Msg {
	var out []*nats.Msg
	for _, m := range ms {
		if m.Subject == subject {
			out = append(out, m)
		}
	}
	return out
}

func subjectsOf(ms []*nats.Msg) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Subject)
	}
	return out
}

// principal is one kind of client of a single node.
type principal struct {
	name, role     string // role: a user role, or "system"
	user, password string // "": anonymous
	// control is a subject the principal may request and the server
	// answers; controlSeen, the subject StreamAccount sees that request
	// on ("": it does not reach StreamAccount).
	control, controlSeen string
	// account is the principal's NATS account.
	account string
	// beside: the principal is a client of StreamAccount itself (the
	// anonymous loopback clients of a standalone node with no users),
	// reaching its role's rows by permission: both ways, what orderstore's
	// side publishes there and what it publishes there itself.
	beside bool
}

// reaches says whether p's subscription on r receives orderstore's own
// publishes (sub) or p's publishes on r reach orderstore's side (!sub).
func (p principal) reaches(r subjectRow, sub bool) bool {
	if p.beside {
		return r.imports(p.role)
	}
	return r.imports(p.role) && r.stream == sub
}

func (p principal) connect(t *testing.T, app *orderstore.Appliance) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	if p.user == "" {
		nc, err := nats.Connect(app.ClientURL(), nats.MaxReconnects(0))
		if err != nil {
			t.Fatalf("anonymous loopback client: %v", err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return nc, js
	}
	return connectAs(t, app, p.user, p.password)
}

// TestInternalSubjectsPerPrincipal tries every row of the internal
// subjects table as every principal of a single node, with users and
// without: a principal's subscription receives what orderstore's own side
// publishes there only for a row its role imports as a stream, and a
// principal's publish reaches orderstore's own side only for a row its
// role imports as a service (the stream's own subjects too: its
// subscription answers them, and an event published with an ack gets the
// stream's own ack). The anonymous clients of a standalone node with no
// users are clients of StreamAccount itself: they reach an admin's rows
// both ways, and no other row either way.
func TestInternalSubjectsPerPrincipal(t *testing.T) {
	jsAPI := "$JS.API.INFO"
	sys := principal{name: "system", role: "system", user: "sys", password: sysPassword, control: "$SYS.REQ.SERVER.PING", account: "SYS"}
	users := []principal{
		{name: "producer", role: orderstore.RoleProducer, user: "p1", password: p1Password, control: "orders.created", controlSeen: "orders.created", account: "USER_p1"},
		{name: "reader", role: orderstore.RoleReader, user: "reader", password: readerPassword, control: jsAPI, controlSeen: jsAPI, account: "USER_reader"},
		{name: "admin", role: orderstore.RoleAdmin, user: "ops", password: adminPassword, control: jsAPI, controlSeen: jsAPI, account: "USER_ops"},
		sys,
	}
	anonymous := []principal{{name: "anonymous", role: orderstore.RoleAdmin, control: jsAPI, controlSeen: jsAPI, account: "ORDERSTORE", beside: true}, sys}
	// With a JetStream domain (as in a cluster, on a hub or an edge) they
	// keep an account of their own and an admin's imports.
	anonymousOwn := []principal{{name: "anonymous", role: orderstore.RoleAdmin, control: jsAPI, controlSeen: jsAPI, account: "ANONYMOUS"}, sys}
	domain := func(c *orderstore.Config) { c.JetStream.Domain = "site1" }
	always := func(c *orderstore.Config) { c.JetStream.Durability = orderstore.DurabilityAlways }
	// The default durability (group commit), and "always": the table is
	// the same in every mode.
	modes := []struct {
		name       string
		opts       []func(*orderstore.Config)
		principals []principal
	}{
		{"users", []func(*orderstore.Config){securedConfig}, users},
		{"anonymous", nil, anonymous},
		{"users_always", []func(*orderstore.Config){securedConfig, always}, users},
		{"anonymous_always", []func(*orderstore.Config){always}, anonymous},
		{"anonymous_domain", []func(*orderstore.Config){domain}, anonymousOwn},
	}
	rows := expectedSubjects()
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			app := orderstoretest.Start(t, append(mode.opts, func(c *orderstore.Config) {
				c.Server.SystemUser, c.Server.SystemPassword = "sys", sysPassword
			})...)
			ctx := context.Background()
			ic := orderstore.InternalJetStream(app).Conn()

			// orderstore's own side listens on every row, for every
			// principal's publishes.
			own := newMsgLog(t, nil)
			var ownSubs []*nats.Subscription
			for _, r := range rows {
				s, err := ic.ChanSubscribe(r.subject, own.ch)
				if err != nil {
					t.Fatal(err)
				}
				ownSubs = append(ownSubs, s)
			}
			t.Cleanup(func() {
				for _, s := range ownSubs {
					s.Unsubscribe()
				}
			})
			if err := ic.Flush(); err != nil {
				t.Fatal(err)
			}

			for _, p := range mode.principals {
				t.Run(p.name, func(t *testing.T) {
					nc, js := p.connect(t, app)
					nc.SetErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}) // permission errors are expected

					// Subscribe: orderstore's own side publishes on every
					// row, then the principal's control request is
					// answered on the same channel.
					mine := newMsgLog(t, nil)
					var subs []*nats.Subscription
					for _, r := range rows {
						s, err := nc.ChanSubscribe(r.subject, mine.ch)
						if err != nil {
							t.Fatal(err)
						}
						subs = append(subs, s)
					}
					ctl := "_INBOX.ctl" + nuid.Next()
					if _, err := nc.ChanSubscribe(ctl, mine.ch); err != nil {
						t.Fatal(err)
					}
					if err := nc.Flush(); err != nil {
						t.Fatal(err)
					}
					for i, r := range rows {
						if err := ic.Publish(r.subject, probe(fmt.Sprintf("s-%s-%d", p.name, i))); err != nil {
							t.Fatal(err)
						}
					}
					if err := ic.Flush(); err != nil {
						t.Fatal(err)
					}
					if err := nc.PublishRequest(p.control, ctl, probe("sctl-"+p.name)); err != nil {
						t.Fatal(err)
					}
					mine.waitFor(t, "answer to the control request on "+p.control, func() bool { return len(mine.on(ctl)) > 0 })
					for i, r := range rows {
						want := p.reaches(r, true)
						if got := onSubject(mine.with(fmt.Sprintf("s-%s-%d", p.name, i)), r.subject); (len(got) > 0) != want {
							t.Errorf("%s subscribed %s (row %s): received %d of orderstore's own publishes there, want them: %v", p.name, r.subject, r.pattern, len(got), want)
						}
					}
					for _, s := range subs {
						s.Unsubscribe()
					}

					// Publish: the principal publishes on every row, then
					// its control request must reach orderstore's side
					// after them.
					for i, r := range rows {
						if err := nc.Publish(r.subject, probe(fmt.Sprintf("p-%s-%d", p.name, i))); err != nil {
							t.Fatal(err)
						}
					}
					// An event published with an ack: the stream's own
					// answer, for a role that imports the stream's subjects.
					c, cancel := context.WithTimeout(ctx, 15*time.Second)
					ack, err := js.Publish(c, "orders.created", probe("ack-"+p.name), jetstream.WithRetryAttempts(0))
					cancel()
					if canPublish := p.role == orderstore.RoleProducer || p.role == orderstore.RoleAdmin; canPublish != (err == nil && ack.Stream == "ORDER_EVENTS" && ack.Sequence > 0) {
						t.Errorf("%s published an event with an ack: %+v, %v; want the stream's ack: %v", p.name, ack, err, canPublish)
					}
					if p.controlSeen != "" {
						if err := nc.Publish(p.control, probe("pctl-"+p.name)); err != nil {
							t.Fatal(err)
						}
						own.waitFor(t, p.name+"'s control publish on "+p.control, func() bool {
							return len(onSubject(own.with("pctl-"+p.name), p.controlSeen)) > 0
						})
					} else {
						// Nothing of the system user's reaches StreamAccount:
						// its request answered means the server processed
						// what it published before, and orderstore's side
						// has been handed whatever that delivered to it.
						if _, err := nc.Request(p.control, nil, 10*time.Second); err != nil {
							t.Fatalf("%s: control request %s: %v", p.name, p.control, err)
						}
						if err := ic.Flush(); err != nil {
							t.Fatal(err)
						}
						own.sync(t)
					}
					for i, r := range rows {
						got := onSubject(own.with(fmt.Sprintf("p-%s-%d", p.name, i)), r.subject)
						want := p.reaches(r, false)
						if (len(got) > 0) != want {
							t.Errorf("%s published %s (row %s): orderstore's side received it %d times, want it: %v", p.name, r.subject, r.pattern, len(got), want)
						}
					}
				})
			}
			if err := app.Ready(ctx); err != nil {
				t.Errorf("not ready after the probes: %v", err)
			}
		})
	}
}

// startRogue starts a stock nats-server (no JetStream, random ports,
// loopback) that joins the hub's leaf listener with the hub's leaf user
// and password, as anyone holding them could, and waits for the link.
func startRogue(t *testing.T, leaf string) *server.Server {
	t.Helper()
	u, err := url.Parse("nats-leaf://edge:leaf-secret-1@" + leaf)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := server.NewServer(&server.Options{
		ServerName: "rogue", Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		LeafNode: server.LeafNodeOpts{ReconnectInterval: 250 * time.Millisecond,
			Remotes: []*server.RemoteLeafOpts{{URLs: []*url.URL{u}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("rogue server not ready")
	}
	embeddedtest.WaitFor(t, 15*time.Second, func() error {
		if ns.NumLeafNodes() != 1 {
			return errors.New("the rogue server has not joined the hub's leaf listener")
		}
		return nil
	})
	return ns
}

// rogueClient is a client of the rogue server; it does not receive its own
// publishes.
func rogueClient(t *testing.T, ns *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL(), nats.MaxReconnects(0), nats.NoEcho())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// The rogue's fake answer: what the stream answers a publish with.
var fakePubAck = []byte(`{"stream":"ORDER_EVENTS","seq":424242}`)

// storedMarkers reads every message of a stream: the subjects each probe
// marker (order id) was stored on.
func storedMarkers(t *testing.T, js jetstream.JetStream, stream string) map[string][]string {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	state := st.CachedInfo().State
	out := map[string][]string{}
	for seq := state.FirstSeq; state.Msgs > 0 && seq <= state.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("stream %s: message %d: %v", stream, seq, err)
		}
		var ev struct {
			OrderID string `json:"order_id"`
		}
		json.Unmarshal(m.Data, &ev)
		out[ev.OrderID] = append(out[ev.OrderID], m.Subject)
	}
	return out
}

// TestRogueLeafPeer (issue 17, rows 1-3): a stock nats-server that joins a
// hub's leaf listener with the hub's leaf user and password, next to a
// real edge, sees nothing of orderstore's internal traffic, cannot answer
// for the stream, and cannot store events; the
// edge's sourcing keeps working, each event exactly once.
func TestRogueLeafPeer(t *testing.T) {
	ctx := context.Background()
	leaf := orderstoretest.Addrs(t, 1)[0]
	hub := orderstoretest.Start(t, hubConfig(t, leaf, "edge-1"))
	edge := orderstoretest.Start(t, edgeConfig("edge-1", leaf))
	rogue := startRogue(t, leaf)
	hjs, ejs := embeddedtest.JetStream(t, hub), embeddedtest.JetStream(t, edge) // producers (anonymous loopback)
	ic := orderstore.InternalJetStream(hub).Conn()                              // orderstore's own side of the hub
	rows := expectedSubjects("edge-1")

	// Events published, by order id, on the hub and on the edge: each
	// must be in the aggregate exactly once at the end.
	var hubEvents, edgeEvents []string
	publish := func(t *testing.T, js jetstream.JetStream, id string) *jetstream.PubAck {
		t.Helper()
		c, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		ack, err := js.Publish(c, "orders.created", probe(id), jetstream.WithMsgID(id))
		if err != nil {
			t.Fatalf("publish %s: %v", id, err)
		}
		if ack.Stream != "ORDER_EVENTS" || ack.Sequence == 0 || ack.Sequence == 424242 {
			t.Errorf("publish %s: ack %+v, want the stream's", id, ack)
		}
		if js == hjs {
			hubEvents = append(hubEvents, id)
		} else {
			edgeEvents = append(edgeEvents, id)
		}
		return ack
	}
	// The edge is linked: its first event reaches the hub.
	publish(t, ejs, "edge-first")
	embeddedtest.WaitFor(t, 30*time.Second, func() error {
		if _, err := hub.Order(ctx, "edge-first"); err != nil {
			return fmt.Errorf("the edge's first event at the hub: %w", err)
		}
		return nil
	})

	// Controls: the hub sends $JS.FC.> to its leaf peers, and takes
	// _ORDERSTORE_HUBWATCH.> from them (the table's crossing rows).
	toRogue, fromRogue := "$JS.FC.rogue-ctl.", "_ORDERSTORE_HUBWATCH.rogue-ctl."
	hubSide := newMsgLog(t, nil)
	ctlSub, err := ic.ChanSubscribe(fromRogue+">", hubSide.ch)
	if err != nil {
		t.Fatal(err)
	}
	defer ctlSub.Unsubscribe()
	ic.Flush()
	var ctlN atomic.Int64
	// hubToRogue publishes controls from the hub until one reaches log
	// (through the rogue's subscription on toRogue+">"): everything the
	// rogue subscribed before that subscription is known at the hub, and
	// everything the hub sent it before is in log.
	hubToRogue := func(t *testing.T, log *msgLog) {
		t.Helper()
		before := len(log.on(toRogue + ">"))
		embeddedtest.WaitFor(t, 15*time.Second, func() error {
			ic.Publish(toRogue+strconv.FormatInt(ctlN.Add(1), 10), nil)
			ic.Flush()
			if len(log.on(toRogue+">")) > before {
				return nil
			}
			return errors.New("no control from the hub at the rogue")
		})
	}
	// rogueToHub is the other way: everything the rogue published on rc
	// before has been taken (or dropped) by the hub.
	rogueToHubOn := func(t *testing.T, rc *nats.Conn, prefix string) {
		t.Helper()
		before := len(hubSide.on(prefix + ">"))
		embeddedtest.WaitFor(t, 15*time.Second, func() error {
			rc.Publish(prefix+strconv.FormatInt(ctlN.Add(1), 10), nil)
			rc.Flush()
			ic.Flush()
			if len(hubSide.on(prefix+">")) > before {
				return nil
			}
			return errors.New("no control from the rogue at the hub")
		})
	}
	rogueToHub := func(t *testing.T, rc *nats.Conn) { t.Helper(); rogueToHubOn(t, rc, fromRogue) }

	t.Run("a_receives_nothing_internal", func(t *testing.T) {
		ra := rogueClient(t, rogue)
		seen := newMsgLog(t, nil)
		wild := []string{"_INBOX_ORDERSTORE.>", "$JS.ACK.>", "_ORDERSTORE_INGEST.>", "orders.>"}
		for _, s := range wild {
			if _, err := ra.ChanSubscribe(s, seen.ch); err != nil {
				t.Fatal(err)
			}
		}
		for _, r := range rows {
			if _, err := ra.ChanSubscribe(r.subject, seen.ch); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := ra.ChanSubscribe(toRogue+">", seen.ch); err != nil {
			t.Fatal(err)
		}
		ra.Flush()
		hubToRogue(t, seen)

		// Traffic: acked events on the hub and the edge, the hub's
		// processor projecting both.
		for i := range 10 {
			publish(t, hjs, fmt.Sprintf("a-hub-%d", i))
			publish(t, ejs, fmt.Sprintf("a-edge-%d", i))
		}
		embeddedtest.WaitFor(t, 30*time.Second, func() error {
			for _, id := range []string{"a-hub-9", "a-edge-9"} {
				if _, err := hub.Order(ctx, id); err != nil {
					return fmt.Errorf("%s at the hub's processor: %w", id, err)
				}
			}
			return nil
		})
		// Each row, published by orderstore's own side of the hub.
		for i, r := range rows {
			ic.Publish(r.subject, probe(fmt.Sprintf("a-row-%d", i)))
		}
		hubToRogue(t, seen)
		for _, s := range wild {
			if got := seen.on(s); len(got) > 0 {
				t.Errorf("the rogue's subscription %s received %d messages, the first on %q", s, len(got), subjectsOf(got[:min(len(got), 3)]))
			}
		}
		for i, r := range rows {
			if got := seen.with(fmt.Sprintf("a-row-%d", i)); !r.hubToEdge && len(got) > 0 {
				t.Errorf("the rogue received %s (row %s, not hub to edge)", r.subject, r.pattern)
			}
		}

		// And the other way: of the rogue's publishes on each row, the
		// hub's side takes only the rows that cross edge to hub.
		own := newMsgLog(t, nil)
		for _, r := range rows {
			s, err := ic.ChanSubscribe(r.subject, own.ch)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Unsubscribe()
		}
		// A control subscribed after the rows: once it crosses, the hub's
		// interest in each row is known at the rogue.
		later := "_ORDERSTORE_HUBWATCH.rogue-ctl-a."
		s, err := ic.ChanSubscribe(later+">", hubSide.ch)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Unsubscribe()
		ic.Flush()
		rogueToHubOn(t, ra, later)
		for i, r := range rows {
			ra.Publish(r.subject, probe(fmt.Sprintf("a-pub-%d", i)))
		}
		rogueToHubOn(t, ra, later)
		for i, r := range rows {
			if got := own.with(fmt.Sprintf("a-pub-%d", i)); !r.edgeToHub && len(got) > 0 {
				t.Errorf("the rogue's publish on %s (row %s, not edge to hub) reached the hub's side", r.subject, r.pattern)
			}
		}
	})

	t.Run("b_forged_acks_never_taken", func(t *testing.T) {
		rb := rogueClient(t, rogue)
		rb.SetErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})
		// The rogue answers whatever it sees with a reply, and floods
		// fake acks on every ingest ack subject it can see or guess
		// (the next ids after one it saw, and blind ones).
		var mu sync.Mutex
		last := map[string]uint64{} // ack prefix -> highest id seen (ids in base 36)
		learn := func(s string) {
			if !strings.HasPrefix(s, "_INBOX_ORDERSTORE.") {
				return
			}
			i := strings.LastIndexByte(s, '.')
			n, err := strconv.ParseUint(s[i+1:], 36, 64)
			mu.Lock()
			defer mu.Unlock()
			if _, ok := last[s[:i+1]]; !ok || err == nil && n > last[s[:i+1]] {
				last[s[:i+1]] = n
			}
		}
		var seen atomic.Int64
		answer := func(m *nats.Msg) {
			seen.Add(1)
			learn(m.Subject)
			learn(m.Reply)
			if m.Reply != "" {
				rb.Publish(m.Reply, fakePubAck)
			}
		}
		for _, s := range []string{"_INBOX_ORDERSTORE.>", "orders.>"} {
			if _, err := rb.Subscribe(s, answer); err != nil {
				t.Fatal(err)
			}
		}
		ctlLog := newMsgLog(t, nil)
		rb.ChanSubscribe(toRogue+">", ctlLog.ch)
		rb.Flush()
		hubToRogue(t, ctlLog)
		stop, flooded := make(chan struct{}), make(chan struct{})
		var fakes atomic.Int64
		go func() {
			defer close(flooded)
			for {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				guesses := []string{"_INBOX_ORDERSTORE." + nuid.Next() + "." + nuid.Next(), "_INBOX_ORDERSTORE.x.y"}
				for p, n := range last {
					for j := uint64(1); j <= 4; j++ {
						guesses = append(guesses, p+strconv.FormatUint(n+j, 36))
					}
				}
				mu.Unlock()
				for _, g := range guesses {
					rb.Publish(g, fakePubAck)
				}
				fakes.Add(int64(len(guesses)))
				rb.Flush()
			}
		}()
		for i := range 20 {
			for _, p := range []struct {
				name string
				js   jetstream.JetStream
			}{{"hub", hjs}, {"edge", ejs}} {
				c, cancel := context.WithTimeout(ctx, 30*time.Second)
				ack, err := p.js.Publish(c, "orders.created", probe(fmt.Sprintf("b-%s-%d", p.name, i)), jetstream.WithExpectLastSequence(1<<40))
				cancel()
				if err == nil {
					t.Errorf("a producer on the %s got a positive ack %+v for a publish the stream refuses (wrong last sequence)", p.name, ack)
				}
			}
		}
		close(stop)
		<-flooded
		rogueToHub(t, rb) // the rogue's fakes were all delivered to the hub
		if fakes.Load() == 0 {
			t.Fatal("the rogue published no fake acks")
		}
		t.Logf("the rogue published %d fake acks and saw %d messages", fakes.Load(), seen.Load())
		// Producers are still answered by the stream.
		publish(t, hjs, "b-hub-after")
		publish(t, ejs, "b-edge-after")
	})

	t.Run("c_answers_no_producer_stores_nothing", func(t *testing.T) {
		rc := rogueClient(t, rogue)
		rc.SetErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})
		var requests atomic.Int64
		responder := newMsgLog(t, func(m *nats.Msg) {
			if strings.HasPrefix(m.Subject, toRogue) {
				return
			}
			requests.Add(1)
			if m.Reply != "" {
				rc.Publish(m.Reply, fakePubAck)
			}
		})
		// The stream's subjects, as a plain and a queue subscriber: an
		// answer before the stream's would be a forged ack.
		if _, err := rc.ChanSubscribe("orders.>", responder.ch); err != nil {
			t.Fatal(err)
		}
		if _, err := rc.ChanQueueSubscribe("orders.>", "orderstore-ingest", responder.ch); err != nil {
			t.Fatal(err)
		}
		rc.ChanSubscribe(toRogue+">", responder.ch)
		rc.Flush()
		hubToRogue(t, responder)
		type acked struct {
			js  jetstream.JetStream
			id  string
			seq uint64
		}
		var acks []acked
		for i := range 10 {
			for _, p := range []struct {
				name string
				js   jetstream.JetStream
			}{{"hub", hjs}, {"edge", ejs}} {
				id := fmt.Sprintf("c-%s-%d", p.name, i)
				acks = append(acks, acked{p.js, id, publish(t, p.js, id).Sequence})
			}
		}
		hubToRogue(t, responder)
		if n := requests.Load(); n > 0 {
			t.Errorf("the rogue's responder on orders.> received %d producer publishes", n)
		}
		for _, a := range acks {
			st, err := a.js.Stream(ctx, "ORDER_EVENTS")
			if err != nil {
				t.Fatal(err)
			}
			if m, err := st.GetMsg(ctx, a.seq); err != nil || string(m.Data) != string(probe(a.id)) {
				t.Errorf("%s acked at %d, but that is not where the stream holds it: %v", a.id, a.seq, err)
			}
		}

		// `nats pub orders.created` and `nats req orders.created` from the
		// rogue.
		if err := rc.Publish("orders.created", probe("c-rogue-pub")); err != nil {
			t.Fatal(err)
		}
		if m, err := rc.Request("orders.created", probe("c-rogue-req"), 5*time.Second); err == nil {
			var a struct {
				Stream string          `json:"stream"`
				Seq    uint64          `json:"seq"`
				Error  json.RawMessage `json:"error"`
			}
			if json.Unmarshal(m.Data, &a) == nil && a.Seq > 0 && a.Error == nil {
				t.Errorf("the rogue's request on orders.created was acked: %s", m.Data)
			}
		}
		rogueToHub(t, rc)
		// Anything the hub took from the rogue before is stored before
		// this, and the aggregate sources it in order.
		publish(t, hjs, "c-hub-after")
		embeddedtest.WaitFor(t, 30*time.Second, func() error {
			if len(storedMarkers(t, hjs, "ORDER_EVENTS_ALL")["c-hub-after"]) == 0 {
				return errors.New("c-hub-after not in the aggregate yet")
			}
			return nil
		})
		for _, stream := range []string{"ORDER_EVENTS", "ORDER_EVENTS_ALL"} {
			held := storedMarkers(t, hjs, stream)
			for _, id := range []string{"c-rogue-pub", "c-rogue-req"} {
				if s := held[id]; len(s) > 0 {
					t.Errorf("the hub's %s stored the rogue's %s on %v", stream, id, s)
				}
			}
		}
	})

	t.Run("d_sourcing_exactly_once", func(t *testing.T) {
		var held map[string][]string
		embeddedtest.WaitFor(t, 30*time.Second, func() error {
			held = storedMarkers(t, hjs, "ORDER_EVENTS_ALL")
			for _, id := range append(append([]string(nil), hubEvents...), edgeEvents...) {
				if len(held[id]) == 0 {
					return fmt.Errorf("%s not in the aggregate yet", id)
				}
			}
			return nil
		})
		for prefix, ids := range map[string][]string{orderstore.HubLocalPrefix: hubEvents, "edge-1": edgeEvents} {
			for _, id := range ids {
				if s := held[id]; len(s) != 1 || s[0] != prefix+".orders.created" {
					t.Errorf("%s is in the aggregate on %v, want once on %s.orders.created", id, s, prefix)
				}
			}
		}
		for id, s := range held {
			if strings.HasPrefix(id, "b-") && !strings.HasSuffix(id, "-after") {
				t.Errorf("the refused publish %s is in the aggregate on %v", id, s)
			}
		}
		if len(edgeEvents) < 20 || len(hubEvents) < 20 {
			t.Fatalf("only %d edge and %d hub events published", len(edgeEvents), len(hubEvents))
		}
	})
}
