package orderindex

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// indexFields reads what encoding/json read into the index's two fields
// before it, stopping once it has them.
func TestIndexFields(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 0, 0, 123, time.UTC)
	atJSON, _ := json.Marshal(at)
	long := `"applied":[` + strings.Repeat("12345678,", 300) + `1],"history":[` + strings.Repeat("1,", 256) + `2]`
	for _, c := range []struct {
		name, in string
		status   string // "<nil>" for none
		at       time.Time
		err      bool
	}{
		{"record", `{"order_id":"o-1","status":"paid","last_event":"paid","last_seq":7,"last_event_at":` + string(atJSON) + `,` + long + `}`, "paid", at, false},
		{"fields in any order", `{"last_event_at":` + string(atJSON) + `,"x":{"a":[1,{"b":null}]},"status":"new"}`, "new", at, false},
		{"no time", `{"status":"created"}`, "created", time.Time{}, false},
		{"null time", `{"status":"created","last_event_at":null}`, "created", time.Time{}, false},
		{"escaped status", `{"status":"sh\u0069pped \"x\""}`, `shipped "x"`, time.Time{}, false},
		{"no status", `{"order_id":"o-1","last_event_at":` + string(atJSON) + `}`, "<nil>", at, false},
		{"null status", `{"status":null,"last_event_at":` + string(atJSON) + `}`, "<nil>", at, false},
		{"empty object", `{}`, "<nil>", time.Time{}, false},
		{"the last of two", `{"status":"a","status":"b","last_event_at":null}`, "b", time.Time{}, false},
		{"status a number", `{"status":7}`, "", time.Time{}, true},
		{"time not a time", `{"status":"a","last_event_at":"yesterday"}`, "", time.Time{}, true},
		{"not JSON", `not json`, "", time.Time{}, true},
		{"an array", `["status","paid"]`, "", time.Time{}, true},
		{"cut short", `{"order_id":"o-1","stat`, "", time.Time{}, true},
		{"empty", ``, "", time.Time{}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, gotAt, err := indexFields([]byte(c.in))
			if (err != nil) != c.err {
				t.Fatalf("err %v, want an error: %v", err, c.err)
			}
			if c.err {
				return
			}
			got := "<nil>"
			if status != nil {
				got = *status
			}
			if got != c.status || !gotAt.Equal(c.at) {
				t.Errorf("got %q %v, want %q %v", got, gotAt, c.status, c.at)
			}
			// encoding/json reads the same out of every valid record here.
			var rec struct {
				Status      *string   `json:"status"`
				LastEventAt time.Time `json:"last_event_at"`
			}
			if err := json.Unmarshal([]byte(c.in), &rec); err != nil {
				t.Fatalf("encoding/json: %v", err)
			}
			if fmt.Sprint(rec.Status == nil) != fmt.Sprint(status == nil) || (status != nil && *rec.Status != *status) || !rec.LastEventAt.Equal(gotAt) {
				t.Errorf("encoding/json read %v %v", rec.Status, rec.LastEventAt)
			}
		})
	}
}

// The cost of indexing a write of a long-lived order's record, whose
// bookkeeping lists hold hundreds of sequences (go test -run '^$' -bench
// IndexFields ./internal/orderindex).
func BenchmarkIndexFields(b *testing.B) {
	rec := []byte(`{"order_id":"o-1","status":"paid","last_event":"paid","last_seq":123456,"first_seq":7,"events":300,` +
		`"first_event_at":"2026-12-06T10:00:00.123Z","last_event_at":"2026-12-06T10:00:00.123Z","updated_at":"2026-12-06T10:00:00.123Z",` +
		`"applied":[` + strings.Repeat("12345678,", 40) + `1],"applied_floor":123000,"history":[` + strings.Repeat("12345678,", 255) + `2],"history_chunks":1}`)
	b.Run("indexFields", func(b *testing.B) {
		for b.Loop() {
			if s, _, err := indexFields(rec); err != nil || *s != "paid" {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			var r struct {
				Status      *string   `json:"status"`
				LastEventAt time.Time `json:"last_event_at"`
			}
			if err := json.Unmarshal(rec, &r); err != nil || *r.Status != "paid" {
				b.Fatal(err)
			}
		}
	})
}
