package processor

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// FuzzParseEvent feeds arbitrary subjects and payloads to the envelope
// decoder. Whatever the input, parse does not panic; an accepted event has
// an order id that is a usable KV key (the projection's key); a rejected
// one is poison: the batch dead-letters it at once, without calling the
// handler, and deadLetter marks and counts it as poison by
// errors.Is(err, ErrPoison). eventType is the subject's last token.
func FuzzParseEvent(f *testing.F) {
	for _, s := range []struct{ subject, data string }{
		{"orders.created", `{"order_id":"o-1"}`},
		{"orders.shipped", `{"order_id":"o-1","status":"in-transit","carrier":"dhl"}`},
		{"orders.paid", `{"order_id":"tenant/2026/o_1=a.b","status":""}`},
		{"orders.created", `{"order_id":"o-1","order_id":"o-2"}`},
		{"orders.created", `{"ORDER_ID":"o-1"}`},
		{"orders.created", `{"order_id":"o-1","status":null}`},
		{"orders.created", `{"order_id":null}`},
		{"orders.created", `{"order_id":""}`},
		{"orders.created", `{"order_id":42}`},
		{"orders.created", `{"order_id":1e400}`},
		{"orders.created", `{"order_id":["o-1"]}`},
		{"orders.created", `{"order_id":"o-1","status":7}`},
		{"orders.created", `{"order_id":"a b"}`},
		{"orders.created", `{"order_id":"orders.>"}`},
		{"orders.created", `{"order_id":"a.*.b"}`},
		{"orders.created", `{"order_id":".a"}`},
		{"orders.created", `{"order_id":"a."}`},
		{"orders.created", `{"order_id":"a..b"}`},
		{"orders.created", `{"order_id":"a\n"}`},
		{"orders.created", `{"order_id":"\u00e9"}`},
		{"orders.created", "{\"order_id\":\"\xff\xfe\"}"},
		{"orders.created", "{\"order_id\":\"o-1\",\"status\":\"\xc3\x28\"}"},
		{"orders.created", `{"order_id":"` + strings.Repeat("a", maxKeyLen) + `"}`}, // the longest usable id
		{"orders.created", `{"order_id":"` + strings.Repeat("a ", 5000) + `"}`},
		{"orders.created", `{"order_id":"o-1","x":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`},
		{"orders.created", `{"order_id":"o-1"} trailing`},
		{"orders.created", `[]`},
		{"orders.created", `null`},
		{"orders.created", `"o-1"`},
		{"orders.created", ``},
		{"", `{"order_id":"o-1"}`},
		{"orders.", `{"order_id":"o-1"}`},
		{"created", `{"order_id":"o-1"}`},
	} {
		f.Add(s.subject, []byte(s.data))
	}
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		typ := eventType(subject)
		if strings.Contains(typ, ".") || !strings.HasSuffix(subject, typ) || (typ != subject && !strings.HasSuffix(subject, "."+typ)) {
			t.Errorf("eventType(%q) = %q, want the last token", subject, typ)
		}

		id, status, err := parse(subject, data)
		if err != nil {
			if !errors.Is(err, ErrPoison) {
				t.Fatalf("parse(%q, %s) error %v does not wrap ErrPoison: the event would be retried instead of dead-lettered", subject, short(data), err)
			}
			if id != "" || status != "" {
				t.Errorf("parse(%q, %s) = %q, %q with error %v, want empty values", subject, short(data), id, status, err)
			}
			return
		}
		if id == "" || !ValidOrderID(id) {
			t.Fatalf("parse(%q, %s) accepted order id %q, which ValidOrderID rejects", subject, short(data), id)
		}
		if reason := kvKeyProblem(id); reason != "" {
			t.Fatalf("parse(%q, %s) accepted order id %s that is no usable KV key: %s", subject, short(data), short([]byte(id)), reason)
		}
	})
}

// maxKeyLen bounds an order id so that the projection's KV operations fit
// in one NATS protocol line: nats-server's max_control_line is 4096 bytes
// by default, and the projection's read is a request on
// "$JS.API.DIRECT.GET.KV_<bucket>.$KV.<bucket>.<key>" with a reply inbox.
// A longer line makes the server close the connection ("maximum control
// line exceeded"). 3KiB leaves 1KiB for "PUB ", that prefix with a long
// bucket name, and the inbox.
const maxKeyLen = 3 << 10

// kvKeyProblem checks id against what a NATS KV key must be, independently
// of ValidOrderID: the characters nats.go allows (letters, digits, '-',
// '/', '_', '=', '.'), no empty token ('.' at either end or twice in a
// row), and a subject that fits a control line.
func kvKeyProblem(id string) string {
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-', c == '/', c == '_', c == '=', c == '.':
		default:
			return fmt.Sprintf("contains byte %q, not allowed in a KV key", c)
		}
	}
	if strings.HasPrefix(id, ".") || strings.HasSuffix(id, ".") || strings.Contains(id, "..") {
		return "has an empty subject token"
	}
	if len(id) > maxKeyLen {
		return fmt.Sprintf("longer than %d bytes: the projection's KV requests would not fit nats-server's 4096-byte max_control_line", maxKeyLen)
	}
	return ""
}

// short quotes b, cut to its first 60 bytes, for failure messages.
func short(b []byte) string {
	if len(b) <= 60 {
		return fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf("%q... (%d bytes)", b[:60], len(b))
}
