package testkit

import (
	"cmp"
	"strings"
	"time"

	"github.com/orderstore/orderstore/processor"
)

// OracleEvent is one event as a test's oracle reads it from the stream.
type OracleEvent struct {
	Seq             uint64
	Subject, Status string // Status: the payload's "status" ("" if none)
	Data            []byte
	Time            time.Time
}

// FoldOrder folds one order's events, in stream order, into the state the projection must hold for
// them: written apart from the projection's own fold, so that a test comparing the two can fail.
func FoldOrder(id string, evs []OracleEvent) processor.Order {
	var o processor.Order
	for _, r := range evs {
		typ := r.Subject[strings.LastIndex(r.Subject, ".")+1:]
		if o.Events == 0 {
			o.OrderID, o.FirstSeq, o.FirstEventAt = id, r.Seq, r.Time.UTC()
		}
		o.Events++
		o.LastSeq, o.LastEvent, o.LastEventAt = r.Seq, typ, r.Time.UTC()
		o.Status = cmp.Or(r.Status, typ)
	}
	return o
}
