package ingest

import (
	"errors"
	"strings"
	"testing"

	"github.com/orderstore/orderstore/natsserver/server"
)

func testAdmission() *Admission {
	return NewAdmission(AdmitConfig{Stream: "ORDER_EVENTS", StreamAccount: "ORDERSTORE", OwnInbox: "_INBOX_OWN", MaxEvent: 400, Epoch: "E1", Scope: "edge1/", InvalidCode: 10422,
		Validate: func(subject string, data []byte) error {
			if strings.Contains(string(data), "bad") {
				return errors.New("missing property order_id")
			}
			return nil
		}})
}

// The headers an event is stored with: the Nats-Msg-Id scoped to the
// publisher's account (every line of it), nats' and orderstore's own
// headers dropped in any spelling (a direct get's and a status too), the
// Orderstore-* ones kept for orderstore's own account alone, the epoch
// stamped; other headers as they came.
func TestAdmitHeaders(t *testing.T) {
	ad := testAdmission()
	in := "NATS/1.0\r\nNats-Msg-Id: a1\r\nX-Trace: keep me\r\nnats-request-info: {\"acc\":\"X\"}\r\nORDERSTORE-EPOCH: forged\r\n" +
		"Nats-Stream-Source: forged\r\nOrderstore-Replay-Of: 7\r\nNats-Msg-Id: a2\r\nstatus: 409\r\nNats-Subject: orders.x\r\norderstore-poison: true\r\n\r\n"
	h, added := ad.headers([]byte(in), "USER1_p")
	got := string(h)
	want := "NATS/1.0\r\nNats-Msg-Id: edge1/USER1_p:a1\r\nX-Trace: keep me\r\nNats-Msg-Id: edge1/USER1_p:a2\r\nOrderstore-Epoch: E1\r\n\r\n"
	if got != want {
		t.Errorf("producer's headers:\n got %q\nwant %q", got, want)
	}
	// Two scopes ("edge1/USER1_p:") and the epoch line are orderstore's.
	if want := 2*len("edge1/USER1_p:") + len("Orderstore-Epoch: E1\r\n"); added != want {
		t.Errorf("orderstore added %d bytes, want %d", added, want)
	}
	h, _ = ad.headers([]byte(in), "ORDERSTORE")
	got = string(h)
	if !strings.Contains(got, "Orderstore-Replay-Of: 7\r\n") || !strings.Contains(got, "orderstore-poison: true\r\n") || strings.Contains(got, "status") || !strings.Contains(got, "Nats-Msg-Id: edge1/ORDERSTORE:a1\r\n") {
		t.Errorf("orderstore's own replay: %q, want the replay header kept and the id scoped", got)
	}
	if h, added := ad.headers(nil, "USER1_p"); string(h) != "NATS/1.0\r\nOrderstore-Epoch: E1\r\n\r\n" || added != len(h) {
		t.Errorf("no headers: %q, %d bytes added", h, added)
	}
	if got, _ := NewAdmission(AdmitConfig{Stream: "S"}).headers(nil, "A"); got != nil {
		t.Errorf("no headers and no epoch: %q, want nil", got)
	}
}

func TestAdmitRefusals(t *testing.T) {
	ad := testAdmission()
	msg := func(kind, subject, data string) *server.AdmitMsg {
		return &server.AdmitMsg{Stream: "ORDER_EVENTS", StreamAccount: "ORDERSTORE", Account: "USER1_p", Kind: kind, Subject: subject, Reply: "_INBOX.x", Data: []byte(data)}
	}
	for _, c := range []struct {
		name string
		m    *server.AdmitMsg
		code int
		text string
	}{
		{"wildcard", msg("Client", "orders.*", "{}"), 400, "wildcard token"},
		{"full wildcard", msg("Client", "orders.a.>", "{}"), 400, "wildcard token"},
		{"too big", msg("Client", "orders.created", strings.Repeat("x", 390)), 400, "max_msg_size of 400"},
		{"invalid", msg("Client", "orders.created", `{"bad":1}`), 422, `"orders.created": missing property order_id (nothing was stored)`},
		{"leaf", msg("Leafnode", "orders.created", "{}"), 403, "leaf node"},
	} {
		_, err := ad.Admit(c.m)
		if err == nil || err.Code != c.code || !strings.Contains(err.Description, c.text) || !strings.HasPrefix(err.Description, "orderstore: ") {
			t.Errorf("%s: %+v, want code %d and %q", c.name, err, c.code, c.text)
		}
	}
	if err := func() *server.ApiError { _, e := ad.Admit(msg("Client", "orders.created", `{"bad":1}`)); return e }(); err.ErrCode != 10422 {
		t.Errorf("invalid: err_code %d, want 10422", err.ErrCode)
	}
	// Another stream (orderstore's buckets) is not touched.
	other := msg("Client", "$KV.ORDERS.*", `bad`)
	other.Stream = "KV_ORDERS"
	if h, err := ad.Admit(other); h != nil || err != nil {
		t.Errorf("another stream: %q %v, want it untouched", h, err)
	}
	c := ad.Counts()
	if c.Refused != 4 || c.Invalid != 2 || c.Admitted != 0 {
		t.Errorf("counts %+v, want 4 refused, 2 invalid", c)
	}
}

// A publish made at another node arrives from a route: its account is
// the one nats named in Nats-Request-Info at that node's service import,
// or, when there is none, orderstore's own if it waits for its ack on
// orderstore's inbox; any other is one of nats' own clients, refused.
func TestAdmitAccountFromRoute(t *testing.T) {
	ad := testAdmission()
	m := &server.AdmitMsg{Stream: "ORDER_EVENTS", Account: "ORDERSTORE", Kind: "Router", Subject: "orders.created", Data: []byte("{}"),
		Header: []byte("NATS/1.0\r\nNats-Msg-Id: k\r\nNats-Request-Info: {\"acc\":\"USER2_q\",\"rtt\":1}\r\n\r\n")}
	h, err := ad.Admit(m)
	if err != nil || !strings.Contains(string(h), "Nats-Msg-Id: edge1/USER2_q:k\r\n") || strings.Contains(string(h), "Request-Info") {
		t.Errorf("routed from USER2_q: %q %v", h, err)
	}
	m.Header, m.Reply = []byte("NATS/1.0\r\nNats-Msg-Id: k\r\n\r\n"), "_INBOX_OWN.abc.1"
	if h, _ := ad.Admit(m); !strings.Contains(string(h), "Nats-Msg-Id: edge1/ORDERSTORE:k\r\n") {
		t.Errorf("routed from orderstore's own: %q", h)
	}
	for _, reply := range []string{"", "_INBOX_OWNER.x", "$JS.ACK.x"} {
		m.Reply = reply
		if h, err := ad.Admit(m); err == nil || err.Code != 403 || m.Reply != "" {
			t.Errorf("routed without Nats-Request-Info, reply %q: %q %v, reply %q; want refused unanswered", reply, h, err, m.Reply)
		}
	}
}

// What nats' own clients publish into the stream (a republish, an ack
// sent to a reply subject of the stream's, an API answer) is refused and
// left unanswered (its Reply cleared), whatever the account.
func TestAdmitRefusesInternalClients(t *testing.T) {
	ad := testAdmission()
	for _, kind := range []string{"JetStream", "System", "Account", "Gateway"} {
		m := &server.AdmitMsg{Stream: "ORDER_EVENTS", StreamAccount: "ORDERSTORE", Account: "ORDERSTORE", Kind: kind, Subject: "orders.created",
			Reply: "orders.acked", Header: []byte("NATS/1.0\r\nOrderstore-Replay-Of: 1\r\n\r\n"), Data: []byte("{}")}
		if h, err := ad.Admit(m); err == nil || err.Code != 403 || !strings.Contains(err.Description, kind) || m.Reply != "" {
			t.Errorf("%s: %q %+v, reply %q; want a 403 naming it, unanswered", kind, h, err, m.Reply)
		}
	}
	if c := ad.Counts(); c.Refused != 4 || c.Admitted != 0 {
		t.Errorf("counts %+v, want 4 refused", c)
	}
}

// hasWildcard finds a '*' or '>' token, and only a whole token.
func TestHasWildcard(t *testing.T) {
	for subject, want := range map[string]bool{
		"orders.a": false, "orders.*": true, "orders.>": true, "*": true, ">": true, "*.a": true,
		"orders.a*": false, "orders.>x": false, "x>.a": false, "orders..>": true, "orders.*.b": true, "": false,
	} {
		if got := hasWildcard(subject); got != want {
			t.Errorf("hasWildcard(%q) = %v, want %v", subject, got, want)
		}
	}
}
