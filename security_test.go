package orderstore_test

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/bcrypt"

	"github.com/orderstore/orderstore"
	"github.com/orderstore/orderstore/embedded"
	"github.com/orderstore/orderstore/embedded/embeddedtest"
	"github.com/orderstore/orderstore/internal/testkit"
	"github.com/orderstore/orderstore/orderstoretest"
	"github.com/orderstore/orderstore/status"
)

func debugLogger(buf *testkit.LockedBuffer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug - 4}))
}

const (
	p1Password     = "p1-secret-password"
	p2Password     = "p2-secret-password"
	readerPassword = "reader-secret-password"
	adminPassword  = "admin-secret-password"
	sysPassword    = "sys-secret-password"
	routePassword  = "route-secret-password"
	adminToken     = "admin-token-0123456789-secret"
)

// secrets are every secret the secured config holds: none may show up in
// a log line or an admin response.
var secrets = []string{p1Password, p2Password, readerPassword, adminPassword, sysPassword, adminToken}

func securedConfig(c *orderstore.Config) {
	c.Server.Users = []orderstore.User{
		{Name: "p1", Password: p1Password, Role: orderstore.RoleProducer},
		{Name: "p2", Password: p2Password, Role: orderstore.RoleProducer},
		{Name: "reader", Password: readerPassword, Role: orderstore.RoleReader},
		{Name: "ops", Password: adminPassword, Role: orderstore.RoleAdmin},
	}
	c.Admin.Token = adminToken
	c.Admin.Listen = "127.0.0.1:0"
}

// rawConnect speaks the NATS protocol by hand: it reads INFO, sends
// connect (a JSON object) and a PING, and returns the first line the server
// answers with ("PONG" when in, "-ERR ..." when refused).
func rawConnect(t *testing.T, clientURL, connect string) string {
	t.Helper()
	u, err := url.Parse(clientURL)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "INFO ") {
		t.Fatalf("no INFO from the server: %q %v", line, err)
	}
	fmt.Fprintf(c, "CONNECT %s\r\nPING\r\n", connect)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := r.ReadString('\n')
	if err != nil && line == "" {
		return "closed: " + err.Error()
	}
	return strings.TrimSpace(line)
}

// Test 1: with users configured, with and without a system user, a raw
// CONNECT {} is refused (no hidden no-auth user), and a wrong password is
// refused and logged without the password.
func TestNoAnonymousDoorWithUsers(t *testing.T) {
	for _, withSys := range []bool{false, true} {
		t.Run(fmt.Sprintf("system_user=%v", withSys), func(t *testing.T) {
			var logs testkit.LockedBuffer
			app := orderstoretest.Start(t, securedConfig, func(c *orderstore.Config) {
				c.Logger = debugLogger(&logs)
				if withSys {
					c.Server.SystemUser, c.Server.SystemPassword = "sys", sysPassword
				}
			})
			if got := rawConnect(t, app.ClientURL(), `{"verbose":false}`); !strings.Contains(got, "Authorization Violation") {
				t.Errorf("CONNECT {} answered %q, want -ERR 'Authorization Violation'", got)
			}
			if _, err := nats.Connect(app.ClientURL()); err == nil {
				t.Error("a client without credentials connected")
			}
			// In-process too: auth applies to in-process connections.
			if _, err := nats.Connect("", nats.InProcessServer(app)); err == nil {
				t.Error("an in-process client without credentials connected")
			}
			wrong := "wrong-password-guess-42"
			if _, err := nats.Connect(app.ClientURL(), nats.UserInfo("p1", wrong)); err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
				t.Errorf("wrong password: %v, want an authorization violation", err)
			}
			embeddedtest.WaitFor(t, 10*time.Second, func() error {
				if !strings.Contains(logs.String(), `authentication error - User \"p1\"`) {
					return errors.New("no authentication error logged for p1")
				}
				return nil
			})
			nc, err := nats.Connect(app.ClientURL(), nats.UserInfo("p1", p1Password))
			if err != nil {
				t.Fatalf("p1 with its password: %v", err)
			}
			nc.Close()
			for _, s := range append(secrets, wrong) {
				if strings.Contains(logs.String(), s) {
					t.Errorf("the log holds the secret %q", s)
				}
			}
			if strings.Contains(logs.String(), "Plaintext passwords detected") != true {
				t.Error("nats' plaintext password warning is missing with plaintext passwords configured")
			}
		})
	}
}

// Bcrypt hashes are accepted, and with only hashes configured nats does not
// warn about plaintext passwords (orderstore's own connections sign in with
// an nkey).
func TestBcryptPasswordsAndNkeys(t *testing.T) {
	// What `nats server passwd` makes (at bcrypt's lowest cost, for speed).
	h, err := bcrypt.GenerateFromPassword([]byte("hashed-password-1234"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	hash := string(h)
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	var logs testkit.LockedBuffer
	app := orderstoretest.Start(t, func(c *orderstore.Config) {
		c.Logger = debugLogger(&logs)
		c.Server.Users = []orderstore.User{
			{Name: "p1", Password: hash, Role: orderstore.RoleProducer},
			{Name: "nk", Nkey: pub, Role: orderstore.RoleReader},
		}
	})
	nc, err := nats.Connect(app.ClientURL(), nats.UserInfo("p1", "hashed-password-1234"))
	if err != nil {
		t.Fatalf("bcrypt user: %v", err)
	}
	nc.Close()
	if _, err := nats.Connect(app.ClientURL(), nats.UserInfo("p1", hash)); err == nil {
		t.Error("the hash itself was accepted as the password")
	}
	nk, err := nats.Connect(app.ClientURL(), nats.Nkey(pub, kp.Sign))
	if err != nil {
		t.Fatalf("nkey user: %v", err)
	}
	defer nk.Close()
	js, _ := jetstream.New(nk)
	if _, err := js.Stream(context.Background(), "ORDER_EVENTS"); err != nil {
		t.Errorf("nkey reader: stream info: %v", err)
	}
	if strings.Contains(logs.String(), "Plaintext passwords detected") {
		t.Error("nats warns about plaintext passwords though only a bcrypt hash and nkeys are configured")
	}
}

func connectAs(t *testing.T, app *orderstore.Appliance, user, password string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(app.ClientURL(), nats.UserInfo(user, password), nats.MaxReconnects(0))
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// Test 2 (Go clients; natscli's part is in cmd/orderstore): a producer
// listening on _INBOX.> and orders.> sees nothing of another producer's
// acked publishes; each role can do what it may and nothing else; the
// processor keeps projecting.
func TestRolesAndPrivateReplies(t *testing.T) {
	app := orderstoretest.Start(t, securedConfig)
	ctx := context.Background()
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 2*time.Second) }

	// p2 listens to everything it may and may not.
	p2, _ := connectAs(t, app, "p2", p2Password)
	var violations sync.Map
	p2.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations.Store(err.Error(), true) })
	leaked := make(chan *nats.Msg, 64)
	for _, subj := range []string{"_INBOX.>", "orders.>", ">", "$JS.ACK.>", "_INBOX_ORDERSTORE.>"} {
		if _, err := p2.ChanSubscribe(subj, leaked); err != nil {
			t.Fatal(err)
		}
	}
	p2.Flush()

	_, p1 := connectAs(t, app, "p1", p1Password)
	for i := range 5 {
		ack, err := p1.Publish(ctx, "orders.created", []byte(fmt.Sprintf(`{"order_id":"o-%d"}`, i)), jetstream.WithMsgID(fmt.Sprint("m", i)))
		if err != nil {
			t.Fatalf("producer acked publish: %v", err)
		}
		if ack.Stream != "ORDER_EVENTS" || ack.Sequence != uint64(i+1) {
			t.Errorf("ack = %+v", ack)
		}
	}
	if ack, err := p1.Publish(ctx, "orders.created", []byte(`{"order_id":"o-0"}`), jetstream.WithMsgID("m0")); err != nil || !ack.Duplicate {
		t.Errorf("repeated Nats-Msg-Id: %+v, %v; want a duplicate ack", ack, err)
	}
	// The processor still works whatever the user table says.
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		_, err := app.Order(ctx, "o-4")
		return err
	})
	p2.Flush()
	select {
	case m := <-leaked:
		t.Errorf("producer p2 received %q (%q): another user's traffic", m.Subject, m.Data)
	default:
	}
	if _, ok := violations.Load(`nats: permissions violation: Permissions Violation for Subscription to "orders.>"`); !ok {
		t.Error("p2's subscription to orders.> was not refused")
	}

	// What a producer may not do.
	for name, f := range map[string]func(context.Context) error{
		"stream info": func(c context.Context) error { _, err := p1.Stream(c, "ORDER_EVENTS"); return err },
		"create consumer": func(c context.Context) error {
			_, err := p1.CreateConsumer(c, "ORDER_EVENTS", jetstream.ConsumerConfig{})
			return err
		},
		"read projection": func(c context.Context) error { _, err := p1.KeyValue(c, "ORDERS"); return err },
		"purge":           func(c context.Context) error { return purge(c, p1) },
		"delete stream":   func(c context.Context) error { return p1.DeleteStream(c, "ORDER_EVENTS") },
		"direct get": func(c context.Context) error {
			_, err := p1.Conn().RequestWithContext(c, "$JS.API.DIRECT.GET.KV_ORDERS.$KV.ORDERS.o-1", nil)
			return err
		},
		"publish elsewhere": func(c context.Context) error {
			_, err := p1.Publish(c, "dlq.ORDER_EVENTS_DLQ.x", []byte("x"))
			return err
		},
	} {
		c, cancel := short()
		if err := f(c); err == nil {
			t.Errorf("producer could %s", name)
		}
		cancel()
	}

	// A reader reads.
	_, rd := connectAs(t, app, "reader", readerPassword)
	st, err := rd.Stream(ctx, "ORDER_EVENTS")
	if err != nil {
		t.Fatalf("reader: stream info: %v", err)
	}
	if n := st.CachedInfo().State.Msgs; n != 5 {
		t.Errorf("reader sees %d events, want 5", n)
	}
	if _, err := rd.Consumer(ctx, "ORDER_EVENTS", "order-processor"); err != nil {
		t.Errorf("reader: the processor's consumer info: %v", err)
	}
	oc, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("reader: ordered consumer: %v", err)
	}
	if m, err := oc.Next(jetstream.FetchMaxWait(5 * time.Second)); err != nil || m.Headers().Get("Nats-Msg-Id") != "USER_p1:m0" {
		// (A message id is scoped to its producer's account.)
		t.Errorf("reader: ordered read: %v", err)
	}
	dc, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "reader-audit", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatalf("reader: own durable: %v", err)
	}
	batch, err := dc.Fetch(5, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Errorf("reader: ack on its own durable: %v", err)
		}
		n++
	}
	if n != 5 {
		t.Errorf("reader's durable fetched %d, want 5", n)
	}
	kv, err := rd.KeyValue(ctx, "ORDERS")
	if err != nil {
		t.Fatalf("reader: projection: %v", err)
	}
	if _, err := kv.Get(ctx, "o-1"); err != nil {
		t.Errorf("reader: projection read: %v", err)
	}
	for name, f := range map[string]func(context.Context) error{
		"publish": func(c context.Context) error {
			_, err := rd.Publish(c, "orders.created", []byte(`{"order_id":"r"}`))
			return err
		},
		"purge":                          func(c context.Context) error { return purge(c, rd) },
		"delete stream":                  func(c context.Context) error { return rd.DeleteStream(c, "ORDER_EVENTS") },
		"delete a projection key":        func(c context.Context) error { return kv.Delete(c, "o-1") },
		"put a projection key":           func(c context.Context) error { _, err := kv.Put(c, "o-1", []byte("x")); return err },
		"delete the processor's durable": func(c context.Context) error { return rd.DeleteConsumer(c, "ORDER_EVENTS", "order-processor") },
		"fetch from the processor's durable": func(c context.Context) error {
			pc, err := rd.Consumer(c, "ORDER_EVENTS", "order-processor")
			if err != nil {
				return err
			}
			_, err = pc.Next(jetstream.FetchMaxWait(time.Second))
			return err
		},
		"redefine the processor's durable": func(c context.Context) error {
			_, err := rd.CreateOrUpdateConsumer(c, "ORDER_EVENTS", jetstream.ConsumerConfig{Durable: "order-processor", AckPolicy: jetstream.AckNonePolicy})
			return err
		},
		"redefine it through the subject-less create": func(c context.Context) error {
			_, err := rd.Conn().RequestWithContext(c, "$JS.API.CONSUMER.CREATE.ORDER_EVENTS",
				[]byte(`{"stream_name":"ORDER_EVENTS","config":{"durable_name":"order-processor","ack_policy":"none"}}`))
			return err
		},
	} {
		c, cancel := short()
		if err := f(c); err == nil {
			t.Errorf("reader could %s", name)
		}
		cancel()
	}
	// The processor's second ack subject format (found by review): a
	// "+NXT" there is a pull on the processor's consumer, a "+ACK" an ack
	// of its events. The durable guard takes it (and counts it).
	guardCount := func() uint64 {
		req := httptest.NewRequest("GET", "http://127.0.0.1/v1/status", nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		rec := httptest.NewRecorder()
		app.Handler().ServeHTTP(rec, req)
		var st status.Status
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Guard == nil {
			t.Fatalf("/v1/status: %d %s", rec.Code, rec.Body)
		}
		return st.Guard.ForeignConsumerRequests
	}
	before := guardCount()
	v2 := "$JS.ACK._.dIlEhsAy.ORDER_EVENTS.order-processor.1.0.0.0.0"
	inbox := nats.NewInbox()
	stolen, _ := rd.Conn().SubscribeSync(inbox)
	rd.Conn().PublishRequest(v2, inbox, []byte(`+NXT {"batch":10}`))
	rd.Conn().Flush()
	embeddedtest.WaitFor(t, 5*time.Second, func() error {
		if guardCount() <= before {
			return errors.New("the reader's +NXT on the processor's v2 ack subject did not reach the durable guard")
		}
		return nil
	})
	if m, err := stolen.NextMsg(200 * time.Millisecond); err == nil {
		t.Errorf("the reader received the processor's delivery %q", m.Subject)
	}
	if pc, err := rd.Consumer(ctx, "ORDER_EVENTS", "order-processor"); err != nil || pc.CachedInfo().Config.AckPolicy != jetstream.AckExplicitPolicy {
		t.Errorf("the processor's consumer changed: %v", err)
	}

	// The admin does everything, including the system account's server
	// info (what `nats server info` asks).
	ad, adj := connectAs(t, app, "ops", adminPassword)
	if _, err := adj.Stream(ctx, "ORDER_EVENTS"); err != nil {
		t.Errorf("admin: stream info: %v", err)
	}
	akv, err := adj.KeyValue(ctx, "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := akv.Put(ctx, "admin-note", []byte("x")); err != nil {
		t.Errorf("admin: projection write: %v", err)
	}
	if _, err := adj.Publish(ctx, "orders.created", []byte(`{"order_id":"from-admin"}`)); err != nil {
		t.Errorf("admin: publish: %v", err)
	}
	if msg, err := ad.Request("$SYS.REQ.SERVER.PING.VARZ", nil, 5*time.Second); err != nil || !strings.Contains(string(msg.Data), `"server_name"`) {
		t.Errorf("admin: server info (VARZ ping): %v", err)
	}
	if err := purge(ctx, adj); err != nil {
		t.Errorf("admin: purge: %v", err)
	}
	if err := app.Ready(ctx); err != nil {
		t.Errorf("not ready after the role checks: %v", err)
	}
}

func purge(ctx context.Context, js jetstream.JetStream) error {
	st, err := js.Stream(ctx, "ORDER_EVENTS")
	if err != nil {
		// A producer cannot even look the stream up: try the purge
		// request itself.
		_, rerr := js.Conn().RequestWithContext(ctx, "$JS.API.STREAM.PURGE.ORDER_EVENTS", nil)
		return errors.Join(err, rerr)
	}
	return st.Purge(ctx)
}

// In no-user mode (loopback only) an anonymous client has every right but
// the internal inbox: the processor's deliveries stay private.
func TestAnonymousLoopbackCannotReadInternalInbox(t *testing.T) {
	app := orderstoretest.Start(t)
	nc := embeddedtest.Connect(t, app)
	leaked := make(chan *nats.Msg, 64)
	var denied sync.Map
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { denied.Store(err.Error(), true) })
	if _, err := nc.ChanSubscribe(">", leaked); err != nil {
		t.Fatal(err)
	}
	nc.Flush()
	js := embeddedtest.JetStream(t, app)
	if _, err := js.Publish(context.Background(), "orders.created", []byte(`{"order_id":"anon"}`)); err != nil {
		t.Fatal(err)
	}
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		_, err := app.Order(context.Background(), "anon")
		return err
	})
	nc.Flush()
	for len(leaked) > 0 {
		if m := <-leaked; strings.HasPrefix(m.Subject, "_INBOX_ORDERSTORE.") {
			t.Errorf("anonymous client received the internal reply %q", m.Subject)
		}
	}
}

// The anonymous clients beside the stream may not name one of orderstore's
// internal subjects as a reply: the stream's PubAck or the JetStream API's
// answer would be published there for them, a forged answer to a request
// orderstore waits on (natsserver/patches/0009-reply-denied.patch). The
// request is refused, nothing reaches the subject, the event is not stored;
// the same requests with a reply of the client's own are answered.
func TestAnonymousCannotAnswerIntoInternalSubjects(t *testing.T) {
	app := orderstoretest.Start(t)
	own := orderstore.InternalJetStream(app).Conn()
	forged, err := own.SubscribeSync("_INBOX_ORDERSTORE.forged.>")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { forged.Unsubscribe() }) // before the appliance drains its connection
	own.Flush()
	nc := embeddedtest.Connect(t, app)
	var mu sync.Mutex
	var violations []string
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		mu.Lock()
		defer mu.Unlock()
		violations = append(violations, err.Error())
	})
	answers, err := nc.SubscribeSync("_INBOX.mine.>")
	if err != nil {
		t.Fatal(err)
	}
	requests := []struct{ subject, data string }{
		{"$JS.API.STREAM.INFO.ORDER_EVENTS", ""},
		{"orders.created", `{"order_id":"reply-forger"}`},
	}
	for i, r := range requests {
		for _, reply := range []string{fmt.Sprintf("_INBOX_ORDERSTORE.forged.%d", i), fmt.Sprintf("_INBOX.mine.%d", i)} {
			if err := nc.PublishRequest(r.subject, reply, []byte(r.data)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range requests {
		if _, err := answers.NextMsg(15 * time.Second); err != nil {
			t.Fatalf("a request with the client's own reply went unanswered: %v", err)
		}
	}
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(violations) < len(requests) {
			return fmt.Errorf("%d permission violations reported, want %d: %q", len(violations), len(requests), violations)
		}
		return nil
	})
	for _, v := range violations {
		if !strings.Contains(v, "Reply of \"_INBOX_ORDERSTORE.forged.") {
			t.Errorf("violation %q does not name the refused reply", v)
		}
	}
	own.Flush()
	if n, _, _ := forged.Pending(); n != 0 {
		m, _ := forged.NextMsg(0)
		t.Fatalf("%d answers published into orderstore's inbox, the first on %s: %s", n, m.Subject, m.Data)
	}
	info, err := orderstore.InternalJetStream(app).Stream(context.Background(), "ORDER_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	if got := info.CachedInfo().State.Msgs; got != 1 {
		t.Errorf("ORDER_EVENTS holds %d events, want 1 (the publish with the refused reply is not stored)", got)
	}
	if err := app.Ready(context.Background()); err != nil {
		t.Errorf("not ready: %v", err)
	}
}

// No client may create a push consumer that delivers into orderstore's
// own inbox: JetStream would publish every event there for it, into a
// subscription orderstore waits on (a reader finds the projection
// watch's in the bucket's consumer list). The create is refused as a
// permissions violation (natsserver/patches/0019-deliver-denied.patch),
// for a reader, an admin and the anonymous clients (beside the stream and
// in their own account); a deliver subject of the client's own is taken.
func TestPushConsumersCannotDeliverIntoInternalInbox(t *testing.T) {
	domain := func(c *orderstore.Config) { c.JetStream.Domain = "site1" }
	for _, mode := range []struct {
		name       string
		opts       []func(*orderstore.Config)
		principals []principal
	}{
		{"users", []func(*orderstore.Config){securedConfig}, []principal{
			{name: "reader", role: orderstore.RoleReader, user: "reader", password: readerPassword},
			{name: "admin", role: orderstore.RoleAdmin, user: "ops", password: adminPassword}}},
		{"anonymous", nil, []principal{{name: "anonymous", role: orderstore.RoleAdmin}}},
		{"anonymous_domain", []func(*orderstore.Config){domain}, []principal{{name: "anonymous", role: orderstore.RoleAdmin}}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			app := orderstoretest.Start(t, mode.opts...)
			own := orderstore.InternalJetStream(app).Conn()
			forged, err := own.SubscribeSync("_INBOX_ORDERSTORE.forged")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { forged.Unsubscribe() })
			own.Flush()
			if _, err := orderstore.InternalJetStream(app).Publish(context.Background(), "orders.created", []byte(`{"order_id":"pushed"}`)); err != nil {
				t.Fatal(err)
			}
			for _, p := range mode.principals {
				nc, _ := p.connect(t, app)
				nc.SetErrorHandler(func(*nats.Conn, *nats.Subscription, error) {})
				create := func(name, deliver string) error {
					_, err := nc.Request("$JS.API.CONSUMER.CREATE.ORDER_EVENTS."+name,
						[]byte(`{"stream_name":"ORDER_EVENTS","config":{"name":"`+name+`","deliver_subject":"`+deliver+`","ack_policy":"none"}}`), 2*time.Second)
					return err
				}
				if err := create("sneak-"+p.name, "_INBOX_ORDERSTORE.forged"); err == nil {
					t.Errorf("%s created a push consumer delivering into orderstore's inbox", p.name)
				}
				if p.role == orderstore.RoleAdmin {
					mine, _ := nc.SubscribeSync("_INBOX.mine")
					if err := create("mine-"+p.name, "_INBOX.mine"); err != nil {
						t.Errorf("%s: a push consumer delivering to its own inbox: %v", p.name, err)
					} else if _, err := mine.NextMsg(10 * time.Second); err != nil {
						t.Errorf("%s: nothing delivered to its own inbox: %v", p.name, err)
					}
				}
			}
			own.Flush()
			if n, _, _ := forged.Pending(); n != 0 {
				m, _ := forged.NextMsg(0)
				t.Errorf("%d events delivered into orderstore's inbox, the first on %s", n, m.Subject)
			}
		})
	}
}

// A store written before accounts (streams in nats' global account) moves
// to the ORDERSTORE account once, with its events.
func TestLegacyStoreMovesToItsAccount(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "jetstream", "$G")
	srv := embeddedtest.Start(t, func(c *embedded.Config) { c.StoreDir = dir })
	js := embeddedtest.JetStream(t, srv)
	orderstoretest.DeclareOrderEvents(t, js.Conn(), func(c *orderstore.Config) { c.Stream.MaxBytes = 1 << 30 })
	for i := range 3 {
		if _, err := js.Publish(context.Background(), "orders.created", []byte(fmt.Sprintf(`{"order_id":"old-%d"}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	srv.Close()
	if _, err := os.Stat(filepath.Join(old, "streams", "ORDER_EVENTS")); err != nil {
		t.Fatalf("the old layout was not written: %v", err)
	}
	app := orderstoretest.Start(t, func(c *orderstore.Config) { c.JetStream.StoreDir = dir })
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		_, err := app.Order(context.Background(), "old-2")
		return err
	})
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("jetstream/$G still there after the move: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "jetstream", orderstore.StreamAccount, "streams", "ORDER_EVENTS")); err != nil {
		t.Errorf("stream not in its account's directory: %v", err)
	}
}

// Test 3: TLS on the client port and the admin listener, real handshakes.
func TestTLS(t *testing.T) {
	certs := orderstoretest.TLS(t)
	app := orderstoretest.Start(t, securedConfig, func(c *orderstore.Config) {
		c.Server.TLS = orderstore.TLSConfig{CertFile: certs.ServerCert, KeyFile: certs.ServerKey}
		c.Admin.TLS = orderstore.TLSConfig{CertFile: certs.ServerCert, KeyFile: certs.ServerKey}
	})
	nc, err := nats.Connect(app.ClientURL(), nats.RootCAs(certs.CA), nats.UserInfo("p1", p1Password))
	if err != nil {
		t.Fatalf("client trusting the CA: %v", err)
	}
	if !nc.TLSRequired() {
		t.Error("connection not over TLS")
	}
	js, _ := jetstream.New(nc)
	if _, err := js.Publish(context.Background(), "orders.created", []byte(`{"order_id":"tls"}`)); err != nil {
		t.Errorf("acked publish over TLS: %v", err)
	}
	nc.Close()
	if _, err := nats.Connect(app.ClientURL(), nats.RootCAs(certs.OtherCA), nats.UserInfo("p1", p1Password)); err == nil {
		t.Error("a client that does not trust the CA connected")
	}
	if got := rawConnect(t, app.ClientURL(), `{"user":"p1","pass":"`+p1Password+`"}`); got == "PONG" {
		t.Error("a plaintext client got in on a TLS port")
	}

	// The admin listener serves HTTPS.
	pool := x509.NewCertPool()
	ca, _ := os.ReadFile(certs.CA)
	pool.AppendCertsFromPEM(ca)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := hc.Get("https://" + app.AdminAddr() + "/readyz")
	if err != nil {
		t.Fatalf("admin over HTTPS: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.TLS == nil {
		t.Errorf("admin /readyz over HTTPS = %d", resp.StatusCode)
	}
	if resp, err := http.Get("http://" + app.AdminAddr() + "/readyz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("admin answered plain HTTP")
		}
	}
}

// With verify, a client without a certificate signed by ca_file is refused.
func TestTLSVerifyClientCertificates(t *testing.T) {
	certs := orderstoretest.TLS(t)
	app := orderstoretest.Start(t, securedConfig, func(c *orderstore.Config) {
		c.Server.TLS = orderstore.TLSConfig{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, CAFile: certs.CA, Verify: true, MinVersion: "1.3"}
	})
	if _, err := nats.Connect(app.ClientURL(), nats.RootCAs(certs.CA), nats.UserInfo("p1", p1Password)); err == nil {
		t.Error("a client without a certificate connected with verify on")
	}
	nc, err := nats.Connect(app.ClientURL(), nats.RootCAs(certs.CA), nats.ClientCert(certs.ClientCert, certs.ClientKey), nats.UserInfo("p1", p1Password))
	if err != nil {
		t.Fatalf("client with a certificate: %v", err)
	}
	nc.Close()
	// TLS 1.2 is below min_version.
	u, _ := url.Parse(app.ClientURL())
	cert, _ := tls.LoadX509KeyPair(certs.ClientCert, certs.ClientKey)
	pool := x509.NewCertPool()
	ca, _ := os.ReadFile(certs.CA)
	pool.AppendCertsFromPEM(ca)
	c, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	r.ReadString('\n') // INFO
	tc := tls.Client(&prefixConn{Conn: c, r: r}, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, ServerName: "127.0.0.1", MaxVersion: tls.VersionTLS12})
	if err := tc.Handshake(); err == nil {
		t.Error("a TLS 1.2 handshake succeeded with min_version 1.3")
	}
}

type prefixConn struct {
	net.Conn
	r *bufio.Reader
}

func (p *prefixConn) Read(b []byte) (int, error) { return p.r.Read(b) }

// Test 6: past max_connections new clients are refused and the admin
// listener still answers.
func TestConnectionFlood(t *testing.T) {
	app := orderstoretest.Start(t, func(c *orderstore.Config) {
		c.Server.MaxConnections = 20
		c.Admin.Listen = "127.0.0.1:0"
	})
	u, _ := url.Parse(app.ClientURL())
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	refused := 0
	for range 60 {
		c, err := net.Dial("tcp", u.Host)
		if err != nil {
			refused++
			continue
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		// A client the server takes answers PING with PONG; one it
		// refuses gets -ERR 'maximum connections exceeded' and a close.
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		io.WriteString(c, "CONNECT {\"verbose\":false}\r\nPING\r\n")
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if strings.Contains(line, "maximum connections exceeded") {
				refused++
				break
			}
			if err != nil || strings.HasPrefix(line, "PONG") {
				break
			}
		}
	}
	if refused != 60-20 {
		t.Errorf("%d of 60 connections refused with max_connections 20, want 40", refused)
	}
	if nc, err := nats.Connect(app.ClientURL(), nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Error("a client past max_connections connected")
	}
	resp, err := http.Get("http://" + app.AdminAddr() + "/livez")
	if err != nil {
		t.Fatalf("admin listener during the flood: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/livez during the flood = %d", resp.StatusCode)
	}
	if err := app.Ready(context.Background()); err != nil {
		t.Errorf("not ready during the flood (orderstore's own connections are in-process): %v", err)
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		nc, err := nats.Connect(app.ClientURL(), nats.MaxReconnects(0))
		if err != nil {
			return err
		}
		nc.Close()
		return nil
	})
}

// Test 4: the admin listener's guards, on a real socket.
func TestAdminHardening(t *testing.T) {
	var logs testkit.LockedBuffer
	app := orderstoretest.Start(t, securedConfig, func(c *orderstore.Config) {
		c.Logger = debugLogger(&logs)
		c.Admin.ReadTimeout, c.Admin.IdleTimeout = time.Second, time.Second
		c.Admin.AllowedHosts = []string{"orders.example.com"}
	})
	base := "http://" + app.AdminAddr()
	do := func(method, path string, hdr map[string]string, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	bearer := map[string]string{"Authorization": "Bearer " + adminToken}
	with := func(m map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for a, b := range m {
			out[a] = b
		}
		return out
	}

	// Security headers on every answer.
	resp, _ := do("GET", "/v1/status", bearer, "")
	if resp.StatusCode != 200 {
		t.Fatalf("/v1/status = %d", resp.StatusCode)
	}
	for h, want := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff"} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}

	// Host: a rebinding name is refused; IPs, localhost and allowed_hosts pass.
	for host, want := range map[string]int{
		"evil.example:8222": 421, "orders.example.com:8222": 200, "localhost:1": 200, "[::1]:8222": 200, "ORDERS.EXAMPLE.COM": 200,
	} {
		if resp, body := do("GET", "/v1/status", with(bearer, "Host", host), ""); resp.StatusCode != want {
			t.Errorf("Host %q: %d %s, want %d", host, resp.StatusCode, body, want)
		}
	}
	if resp, _ := do("GET", "/readyz", map[string]string{"Host": "lb-probe.internal"}, ""); resp.StatusCode != 200 {
		t.Errorf("/readyz with a foreign Host = %d, want 200 (probes may use any name)", resp.StatusCode)
	}

	// Cross-origin and form POSTs are refused, even with the token.
	json := with(bearer, "Content-Type", "application/json")
	for name, tt := range map[string]struct {
		hdr  map[string]string
		want int
	}{
		"foreign Origin":          {with(json, "Origin", "http://evil.example"), 403},
		"cross-site fetch":        {with(json, "Sec-Fetch-Site", "cross-site"), 403},
		"same-site other port":    {with(json, "Sec-Fetch-Site", "same-site"), 403},
		"form post":               {with(bearer, "Content-Type", "application/x-www-form-urlencoded"), 415},
		"same origin, JSON (404)": {with(json, "Origin", base), 404},
	} {
		if resp, body := do("POST", "/v1/dlq/999/replay", tt.hdr, "{}"); resp.StatusCode != tt.want {
			t.Errorf("%s: %d %s, want %d", name, resp.StatusCode, body, tt.want)
		}
	}
	if resp, _ := do("POST", "/login", map[string]string{"Origin": "http://evil.example", "Content-Type": "application/x-www-form-urlencoded"}, "token="+adminToken); resp.StatusCode != 403 {
		t.Errorf("cross-origin /login = %d, want 403", resp.StatusCode)
	}

	// /login: the token from the body only; the cookie is a session id.
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	if resp, _ := do("POST", "/login?token="+adminToken, form, ""); resp.StatusCode != 401 {
		t.Errorf("/login with the token in the query = %d, want 401", resp.StatusCode)
	}
	resp, _ = do("POST", "/login", form, "token="+url.QueryEscape(adminToken))
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "orderstore_session" {
			session = c
		}
	}
	if resp.StatusCode != 303 || session == nil {
		t.Fatalf("/login = %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	if strings.Contains(session.Value, adminToken) || !session.HttpOnly || session.MaxAge <= 0 || session.SameSite != http.SameSiteStrictMode {
		t.Errorf("session cookie %+v: want a random id, HttpOnly, SameSite=Strict, an expiry", session)
	}
	cookie := map[string]string{"Cookie": "orderstore_session=" + session.Value}
	if resp, _ := do("GET", "/v1/status", cookie, ""); resp.StatusCode != 200 {
		t.Errorf("/v1/status with the session = %d", resp.StatusCode)
	}
	if resp, _ := do("POST", "/logout", cookie, ""); resp.StatusCode != 303 {
		t.Errorf("/logout = %d", resp.StatusCode)
	}
	if resp, _ := do("GET", "/v1/status", cookie, ""); resp.StatusCode != 401 {
		t.Errorf("/v1/status after logout = %d, want 401", resp.StatusCode)
	}

	// A second session, to see that it still works once the address is
	// limited.
	resp, _ = do("POST", "/login", form, "token="+url.QueryEscape(adminToken))
	keep := map[string]string{"Cookie": resp.Header.Get("Set-Cookie")}
	// /login is rate-limited per client and every failure is logged.
	limited := 0
	for i := range 40 {
		resp, _ := do("POST", "/login", form, fmt.Sprintf("token=guess-%d", i))
		if resp.StatusCode == 429 {
			limited++
			if resp.Header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
		}
	}
	if limited < 25 {
		t.Errorf("%d of 40 wrong guesses limited, want most", limited)
	}
	if n := strings.Count(logs.String(), "admin sign-in failed"); n < 5 {
		t.Errorf("%d failed sign-ins logged", n)
	}
	// The right token from the limited address waits too: a guesser
	// cannot tell.
	if resp, _ := do("GET", "/v1/status", bearer, ""); resp.StatusCode != 429 {
		t.Errorf("a limited address with the right token = %d, want 429", resp.StatusCode)
	}
	// A dashboard session keeps working: a guesser on the operator's
	// address (a NAT, loopback) cannot lock it out.
	if resp, _ := do("GET", "/v1/status", keep, ""); resp.StatusCode != 200 {
		t.Errorf("a valid session from a limited address = %d, want 200", resp.StatusCode)
	}
	if strings.Contains(logs.String(), adminToken) || strings.Contains(logs.String(), "guess-1") {
		t.Error("a token (right or guessed) is in the log")
	}

	// A body that never ends is cut at ReadTimeout; an idle keep-alive at
	// IdleTimeout.
	for name, send := range map[string]string{
		"slow body": "POST /login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\ntoken=",
		"idle":      "GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
	} {
		c, err := net.Dial("tcp", app.AdminAddr())
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, send)
		c.SetReadDeadline(time.Now().Add(30 * time.Second)) // a bound far above the 1s timeouts, not what is tested
		_, err = io.Copy(io.Discard, c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s: the listener kept the connection open (read ended by the test's own deadline)", name)
		}
		c.Close()
	}

	// Oversized bodies are refused.
	if resp, _ := do("POST", "/login", form, "token="+strings.Repeat("x", 100<<10)); resp.StatusCode != 401 && resp.StatusCode != 413 && resp.StatusCode != 429 {
		t.Errorf("a 100 KiB login body = %d", resp.StatusCode)
	}
}

// Test 5: no secret from the config in a log line or an admin response
// (the CLI's check -print and syntax errors are tested in cmd/orderstore
// and internal/config).
func TestNoSecretInAdminResponsesOrLogs(t *testing.T) {
	var logs testkit.LockedBuffer
	app := orderstoretest.Start(t, securedConfig, func(c *orderstore.Config) {
		c.Logger = debugLogger(&logs)
		c.Server.SystemUser, c.Server.SystemPassword = "sys", sysPassword
	})
	// Traffic with every user, and wrong passwords.
	for _, u := range [][2]string{{"p1", p1Password}, {"reader", readerPassword}, {"ops", adminPassword}, {"sys", sysPassword}} {
		nc, err := nats.Connect(app.ClientURL(), nats.UserInfo(u[0], u[1]))
		if err != nil {
			t.Fatalf("%s: %v", u[0], err)
		}
		nc.Flush()
		defer nc.Close()
		nats.Connect(app.ClientURL(), nats.UserInfo(u[0], u[1]+"-wrong"))
	}
	base := "http://" + app.AdminAddr()
	for _, p := range []string{"/v1/status", "/readyz", "/livez", "/metrics", "/varz", "/connz?auth=true&subs=true", "/jsz?accounts=true", "/accountz", "/subsz?subs=true", "/healthz", "/v1/dlq", "/"} {
		req, _ := http.NewRequest("GET", base+p, nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, s := range secrets {
			if strings.Contains(string(b), s) {
				t.Errorf("GET %s answers the secret %q", p, s)
			}
		}
	}
	for _, s := range secrets {
		if strings.Contains(logs.String(), s) {
			t.Errorf("the log holds the secret %q", s)
		}
	}
}

// Validation: the holes the issue found are refused by name.
func TestSecurityValidation(t *testing.T) {
	tests := []struct {
		name  string
		f     func(*orderstore.Config)
		field string
	}{
		{"short token", func(c *orderstore.Config) { c.Admin.Token = "x" }, "Admin.Token"},
		{"user without role", func(c *orderstore.Config) { c.Server.Users = []orderstore.User{{Name: "u", Password: "p"}} }, "Server.Users[0].Role"},
		{"unknown role", func(c *orderstore.Config) {
			c.Server.Users = []orderstore.User{{Name: "u", Password: "p", Role: "root"}}
		}, "Server.Users[0].Role"},
		{"no password", func(c *orderstore.Config) { c.Server.Users = []orderstore.User{{Name: "u", Role: "reader"}} }, "Server.Users[0].Password"},
		{"bad nkey", func(c *orderstore.Config) {
			c.Server.Users = []orderstore.User{{Name: "u", Nkey: "SUABC", Role: "reader"}}
		}, "Server.Users[0].Nkey"},
		{"nkey seed", func(c *orderstore.Config) {
			c.Server.Users = []orderstore.User{{Name: "u", Nkey: "SUAMK2FG4MI6UE3ACF3FK3OIQBCEIEZV7NSWFFEW63UXMRLFM2XLAXK4GY", Role: "reader"}}
		}, "Server.Users[0].Nkey"},
		{"reserved name", func(c *orderstore.Config) {
			c.Server.Users = []orderstore.User{{Name: "orderstore-internal", Password: "p", Role: "admin"}}
		}, "Server.Users[0].Name"},
		{"verify without ca", func(c *orderstore.Config) {
			c.Server.TLS = orderstore.TLSConfig{CertFile: "c", KeyFile: "k", Verify: true}
		}, "Server.TLS.Verify"},
		{"admin client certs", func(c *orderstore.Config) {
			c.Admin.TLS = orderstore.TLSConfig{CertFile: "c", KeyFile: "k", CAFile: "ca"}
		}, "Admin.TLS.CAFile"},
		// A hub's leaf listener with client certificates and no certificate
		// of its own ran without TLS; a min_version other than "1.2" or
		// "1.3" on the routes or a leaf remote ran 1.2.
		{"leaf listener client certs without its own", func(c *orderstore.Config) {
			c.LeafNode = orderstore.LeafNodeConfig{Listen: "127.0.0.1:7422", User: "leaf", Password: "pw", TLS: orderstore.TLSConfig{CAFile: "ca", Verify: true}}
		}, "LeafNode.TLS.CAFile"},
		{"cluster min_version", func(c *orderstore.Config) {
			c.Server.Name = "n1"
			c.Cluster = orderstore.ClusterConfig{Name: "c", Listen: "127.0.0.1:6222", Routes: []string{"nats-route://127.0.0.1:6222"},
				TLS: orderstore.TLSConfig{CertFile: "c", KeyFile: "k", MinVersion: "TLSv1.3"}}
		}, "Cluster.TLS.MinVersion"},
		{"leaf remote min_version", func(c *orderstore.Config) {
			c.JetStream.Domain = "edge"
			c.LeafNode.Remotes = []orderstore.LeafRemote{{URL: "nats-leaf://hub:7422", TLS: orderstore.TLSConfig{CAFile: "ca", MinVersion: "1.3 "}}}
		}, "LeafNode.Remotes[0].TLS.MinVersion"},
		// A mistyped URL is echoed with its password masked.
		{"route URL with a password", func(c *orderstore.Config) {
			c.Server.Name = "n1"
			c.Cluster = orderstore.ClusterConfig{Name: "c", Listen: "127.0.0.1:6222", Routes: []string{"nat-route://ops:route-secret@10.0.0.2:6222"}}
		}, "Cluster.Routes[0]"},
		{"leaf URL with a password", func(c *orderstore.Config) {
			c.JetStream.Domain = "edge"
			c.LeafNode.Remotes = []orderstore.LeafRemote{{URL: "nats-lef://edge:leaf-secret@hub:7422"}}
		}, "LeafNode.Remotes[0].URL"},
		{"no max_connections", func(c *orderstore.Config) { c.Server.MaxConnections = 0 }, "Server.MaxConnections"},
		{"open port", func(c *orderstore.Config) { c.Server.Host = "0.0.0.0" }, "Server.Host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ve := expectProblem(t, tt.f, tt.field)
			for _, p := range ve.Problems {
				if strings.Contains(p.Error(), "x\"") && tt.name == "short token" || strings.Contains(p.Error(), "SUAMK2") ||
					strings.Contains(p.Error(), "route-secret") || strings.Contains(p.Error(), "leaf-secret") {
					t.Errorf("the message echoes the secret: %v", p)
				}
			}
		})
	}
	// Bad certificate files fail the preflight, naming the key.
	c := orderstoretest.Config(t)
	c.Server.TLS = orderstore.TLSConfig{CertFile: "/nonexistent/cert.pem", KeyFile: "/nonexistent/key.pem"}
	if _, err := orderstore.Preflight(c); err == nil || !strings.Contains(err.Error(), "server.tls") {
		t.Errorf("Preflight with missing cert files = %v, want an error naming server.tls", err)
	}
}

// expectProblem applies f to the default config and checks that Validate
// reports a problem at field (the file's keys: internal/config's tests).
func expectProblem(t *testing.T, f func(*orderstore.Config), field string) *orderstore.ValidationError {
	t.Helper()
	c := orderstore.DefaultConfig()
	f(&c)
	var ve *orderstore.ValidationError
	if err := c.Validate(); !errors.As(err, &ve) {
		t.Fatalf("Validate() = %v, want a ValidationError", err)
	}
	for _, p := range ve.Problems {
		if p.Field == field {
			return ve
		}
	}
	t.Errorf("Validate() = %v, want a problem at %s", ve, field)
	return ve
}

// rawRequest connects to the client port over plain TCP and sends, in one
// write, its CONNECT (with user and password, unless anonymous), a
// subscription on an inbox and a request on subject: the way a client that
// pipelines its first request after CONNECT does. It returns the answer.
func rawRequest(t *testing.T, app *orderstore.Appliance, user, password, subject string) string {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(app.ClientURL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := r.ReadString('\n'); err != nil { // INFO
		t.Fatal(err)
	}
	connect := map[string]any{"verbose": false, "headers": true, "no_responders": true}
	if user != "" {
		connect["user"], connect["pass"] = user, password
	}
	cj, _ := json.Marshal(connect)
	if _, err := fmt.Fprintf(c, "CONNECT %s\r\nSUB _INBOX.raw 1\r\nPUB %s _INBOX.raw 0\r\n\r\n", cj, subject); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: no answer to a request on %s sent with the CONNECT: %v", user, subject, err)
		}
		if strings.HasPrefix(l, "PING") {
			fmt.Fprint(c, "PONG\r\n")
			continue
		}
		if strings.HasPrefix(l, "MSG ") || strings.HasPrefix(l, "HMSG ") {
			body, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			return l + body
		}
		if strings.HasPrefix(l, "-ERR") {
			return l
		}
	}
}

// The durable guard holds for a request sent in the same read as the
// client's CONNECT (nats noted an account's mappings only before each read,
// with the account the connection had before its CONNECT: such a request
// reached the JetStream API and deleted the processor's durable; patch
// 0007), as anonymous, reader and admin.
func TestGuardHoldsForARequestPipelinedWithConnect(t *testing.T) {
	del := "$JS.API.CONSUMER.DELETE.ORDER_EVENTS.order-processor"
	for _, c := range []struct {
		name           string
		opts           []func(*orderstore.Config)
		user, password string
	}{
		{"anonymous", nil, "", ""},
		{"reader", []func(*orderstore.Config){securedConfig}, "reader", readerPassword},
		{"admin", []func(*orderstore.Config){securedConfig}, "ops", adminPassword},
		// With a JetStream domain nats maps "$JS.<domain>.API.>" to
		// "$JS.API.>" in the stream's account: the anonymous clients stay
		// out of it (a request there would take that mapping, not the
		// guard's).
		{"anonymous_domain", []func(*orderstore.Config){func(c *orderstore.Config) { c.JetStream.Domain = "edge1" }}, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			app := orderstoretest.Start(t, c.opts...)
			got := rawRequest(t, app, c.user, c.password, del)
			if c.name == "anonymous_domain" {
				if got := rawRequest(t, app, "", "", "$JS.edge1.API.CONSUMER.DELETE.ORDER_EVENTS.order-processor"); strings.Contains(got, `"success":true`) {
					t.Errorf("a delete of the processor's durable through the domain's API subject was answered %q", got)
				}
			}
			if !strings.Contains(got, "make a durable of your own") {
				t.Errorf("a delete of the processor's durable sent with the CONNECT was answered %q, want the guard's refusal", got)
			}
			if _, err := orderstore.InternalJetStream(app).Consumer(context.Background(), "ORDER_EVENTS", "order-processor"); err != nil {
				t.Fatalf("the processor's durable after the request: %v", err)
			}
			if err := app.Ready(context.Background()); err != nil {
				t.Errorf("not ready: %v", err)
			}
		})
	}
}

// With no admin token (the loopback default) nats-server's monitoring
// handlers, served on the admin listener, answered every page with
// Access-Control-Allow-Origin: *, so any web site the operator visited
// could read /connz, /jsz, /accountz ... of the local node with a fetch,
// past the Host check. The admin listener grants no cross-origin read. Its own API refuses another
// site's requests, reads too: with no token a page could fire a costly listing blind.
func TestMonitoringGrantsNoCrossOriginRead(t *testing.T) {
	app := orderstoretest.Start(t, func(c *orderstore.Config) { c.Admin.Listen = "127.0.0.1:0" })
	for _, path := range []string{"/v1/status", "/v1/orders?limit=1000", "/v1/dlq?limit=1000"} {
		req, _ := http.NewRequest("GET", "http://"+app.AdminAddr()+path, nil)
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("GET %s from another site: %d, want 403", path, resp.StatusCode)
		}
	}
	for _, path := range []string{"/varz", "/connz", "/jsz", "/accountz", "/healthz", "/subsz", "/leafz", "/routez"} {
		req, _ := http.NewRequest("GET", "http://"+app.AdminAddr()+path, nil)
		req.Header.Set("Origin", "http://evil.example")
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if acao := resp.Header.Get("Access-Control-Allow-Origin"); resp.StatusCode != 200 || acao != "" {
			t.Errorf("%s from another site: %d, Access-Control-Allow-Origin %q, want 200 and none", path, resp.StatusCode, acao)
		}
	}
}

// A route or leaf node listener that faces the network without TLS is warned about, naming its key
// and the table that fixes it; one on loopback or with TLS is not.
func TestPlaintextWarningsRoutesAndLeafs(t *testing.T) {
	tlsFiles := orderstore.TLSConfig{CertFile: "server.pem", KeyFile: "server-key.pem"}
	tests := []struct {
		name, listen string
		tls          bool
		want         string // "" no warning
	}{
		{"cluster on the network", "10.0.0.1:6222", false, "cluster.listen 10.0.0.1:6222 faces the network without TLS"},
		{"cluster on every address", "0.0.0.0:6222", false, "set [cluster.tls]"},
		{"cluster on loopback", "127.0.0.1:6222", false, ""},
		{"cluster with TLS", "10.0.0.1:6222", true, ""},
		{"leaf on the network", "0.0.0.0:7422", false, "leafnode.listen 0.0.0.0:7422 faces the network without TLS"},
		{"leaf hint", "[::]:7422", false, "set [leafnode.tls]"},
		{"leaf on loopback", "[::1]:7422", false, ""},
		{"leaf with TLS", "0.0.0.0:7422", true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := orderstore.DefaultConfig()
			if strings.HasPrefix(tt.name, "cluster") {
				c.Cluster.Name, c.Cluster.Listen = "c", tt.listen
				if tt.tls {
					c.Cluster.TLS = tlsFiles
				}
			} else {
				c.LeafNode.Listen = tt.listen
				if tt.tls {
					c.LeafNode.TLS = tlsFiles
				}
			}
			got := strings.Join(c.PlaintextWarnings(), "\n")
			if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
				t.Errorf("PlaintextWarnings() = %q, want %q", got, cmp.Or(tt.want, "none"))
			}
		})
	}
}

// The system user (for `nats server info/report/list`) publishes system requests only: a JetStream
// request stamped with Nats-Request-Info naming another account, which nats honours from the system
// account, is refused, so it neither deletes the processor's durable nor purges the stream or the
// dead letters; its system requests are still answered.
func TestSystemUserCannotActAsAnAccount(t *testing.T) {
	app := orderstoretest.Start(t, securedConfig, func(c *orderstore.Config) {
		c.Server.SystemUser, c.Server.SystemPassword = "sys", sysPassword
	})
	ctx := context.Background()
	js := orderstore.InternalJetStream(app)
	if _, err := js.Publish(ctx, "orders.created", []byte(`{"order_id":"sys-1"}`)); err != nil {
		t.Fatal(err)
	}
	nc, _ := connectAs(t, app, "sys", sysPassword)
	var refusals testkit.LockedBuffer
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { refusals.Write([]byte(err.Error() + "\n")) })
	// The cluster's own operations stay with it (nats server cluster step-down, peer-remove; a
	// single node ignores them): sent first, a refusal of theirs would come before the others'.
	allowed := []string{"$JS.API.META.LEADER.STEPDOWN", "$JS.API.SERVER.REMOVE"}
	for _, s := range allowed {
		if err := nc.Publish(s, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	subjects := []string{"$JS.API.CONSUMER.DELETE.ORDER_EVENTS.order-processor", "$JS.API.STREAM.PURGE.ORDER_EVENTS",
		"$JS.API.STREAM.PURGE.ORDER_EVENTS_DLQ", "$KV.ORDERS.sys-1"}
	for _, s := range subjects {
		m := nats.NewMsg(s)
		m.Reply = nats.NewInbox()
		m.Header.Set("Nats-Request-Info", `{"acc":"ORDERSTORE"}`)
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := nc.Request("$SYS.REQ.SERVER.PING", nil, 10*time.Second); err != nil {
		t.Fatalf("the system user's server ping: %v", err)
	}
	embeddedtest.WaitFor(t, 10*time.Second, func() error {
		for _, s := range subjects {
			if !strings.Contains(refusals.String(), `Permissions Violation for Publish to "`+s+`"`) {
				return fmt.Errorf("no refusal of the system user's publish to %s: %s", s, refusals.String())
			}
		}
		return nil
	})
	for _, s := range allowed {
		if strings.Contains(refusals.String(), s) {
			t.Errorf("the system user may not send %s: %s", s, refusals.String())
		}
	}
	if _, err := js.Consumer(ctx, "ORDER_EVENTS", "order-processor"); err != nil {
		t.Errorf("the processor's durable: %v", err)
	}
	if st, err := js.Stream(ctx, "ORDER_EVENTS"); err != nil || st.CachedInfo().State.Msgs != 1 {
		t.Errorf("the stream after the system user's purge: %v, want its event", err)
	}
	if err := app.Ready(ctx); err != nil {
		t.Errorf("not ready: %v", err)
	}
}
