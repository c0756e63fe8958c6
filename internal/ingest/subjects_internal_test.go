package ingest

import (
	"testing"

	"github.com/orderstore/orderstore/natsserver/server"
)

func TestSubjectMatches(t *testing.T) {
	for _, c := range []struct {
		pattern, subject string
		want             bool
	}{
		{"orders.>", "orders.created", true},
		{"orders.>", "orders.a.b", true},
		{"orders.>", "orders", false},
		{"orders.*", "orders.created", true},
		{"orders.*", "orders.a.b", false},
		{"orders.created", "orders.created", true},
		{"orders.created", "orders.paid", false},
		{"orders.>", "other.created", false},
		{"orders.*.x", "orders..x", false},
	} {
		if got := server.SubjectMatchesFilter(c.subject, c.pattern); got != c.want {
			t.Errorf("subjectMatches(%q, %q) = %v", c.pattern, c.subject, got)
		}
	}
}
